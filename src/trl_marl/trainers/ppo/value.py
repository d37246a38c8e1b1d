"""PPO's models beside the policies: value models (one per policy, or one for a shared policy), the reward model's
scores, and [`PolicyValueTeam`], the one `nn.Module` that a PPO update differentiates.

Saving a value model ([`save_value_model`]): a value model that trains all its weights is saved whole
(`save_pretrained`). One with frozen weights (`value_train_layers`, or a value model passed in with some weights
frozen) is saved as its trainable tensors, plus any frozen tensor that its base model (`config._name_or_path`) does
not hold with the same values, and a `value_model.json` naming that base. A 135M value model that trains its top 8
of 30 layers saves about a fifth of its weights, and its score head alone when it trains only the head.
[`load_value_model`] puts the two back together.
"""

from __future__ import annotations

import copy
import json
import os
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from ...team import (
    AgentTeam,
    base_state_dict,
    is_partitioned,
    no_split_modules,
    sequence_model_inputs,
)
from ...team.forward import dropout_active, own_storage
from .adapter_critic import ADAPTER_FILE, AdapterCritic
from .config import logit_temperature

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "VALUE_MODEL_INFO",
    "PolicyValueTeam",
    "build_value_models",
    "freeze_below_top_layers",
    "load_value_model",
    "save_value_model",
    "check_joint_tokenizers",
    "check_single_label",
    "first_true_index",
    "in_last_message",
    "response_values",
    "sequence_scores",
    "truncate_after_stop",
]


def first_true_index(flags: torch.Tensor) -> torch.Tensor:
    """Index of the first True of each row (the row length when there is none)."""
    width = flags.size(-1)
    positions = torch.arange(width, device=flags.device).expand_as(flags)
    return torch.where(flags, positions, torch.full_like(positions, width)).min(dim=-1).values


def truncate_after_stop(responses: torch.Tensor, stop: int | None, pad: int,
                        tool_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Replace every token after the first stop token with padding.

    With a `tool_mask` (0 on the tokens the tool loop wrote), only the stop tokens after a row's last written token
    count: a message with tool calls ends with a stop token too, and the response goes on with the results and the
    agent's next message.
    """
    if stop is None:
        return responses
    steps = torch.arange(responses.size(1), device=responses.device).unsqueeze(0)
    first = first_true_index(in_last_message(responses == stop, tool_mask)).unsqueeze(-1)
    return torch.masked_fill(responses, steps > first, pad)


def in_last_message(flags: torch.Tensor, tool_mask: torch.Tensor | None) -> torch.Tensor:
    """`flags` (B, L) kept only after each row's last token written by the tool loop (0 in `tool_mask`): in the
    agent's last message. Without a `tool_mask`, `flags` itself.

    Example:

    ```python
    >>> in_last_message(torch.tensor([[True, False, True, True]]), torch.tensor([[1, 0, 1, 1]]))
    tensor([[False, False,  True,  True]])
    ```
    """
    if tool_mask is None:
        return flags
    steps = torch.arange(flags.size(-1), device=flags.device).unsqueeze(0)
    last_written = torch.where(tool_mask == 0, steps, torch.full_like(steps, -1)).max(dim=-1).values
    return flags & (steps > last_written.unsqueeze(-1))


def _backbone_and_head(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """A transformers sequence classifier's backbone (the attribute its class names in `base_model_prefix`) and score
    head (of the classifier a PEFT model wraps; an [`AdapterCritic`]'s backbone runs with its adapter active);
    `nn.Module.__getattr__` types both attributes as `Tensor | Module`."""
    from peft import PeftModel

    if isinstance(model, PeftModel):
        model = model.get_base_model()
    return getattr(model, cast(str, model.base_model_prefix)), cast(nn.Module, model.score)


def sequence_scores(
    model: nn.Module, query_responses: torch.Tensor, pad_token_id: int, context_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token outputs of a sequence-classification model's head, and the output at the last response token.

    Returns:
        `(per_token, final)`: `(B, S)` per-token scores (the head's single label) and `(B,)` scores at the last
        non-pad token of each response.
    """
    backbone, score = _backbone_and_head(model)
    output = backbone(
        **sequence_model_inputs(query_responses, pad_token_id),
        return_dict=True,
        output_hidden_states=True,
        use_cache=False,
    )
    per_token = score(output.hidden_states[-1]).squeeze(-1)
    last = first_true_index(query_responses[:, context_length:] == pad_token_id) - 1 + context_length
    final = per_token[torch.arange(per_token.size(0), device=per_token.device), last]
    return per_token, final


def response_values(
    model: nn.Module, query_responses: torch.Tensor, pad_token_id: int, context_length: int
) -> torch.Tensor:
    """`(B, R)` values of the response window: `sequence_scores(...)[0][:, context_length - 1 : -1]` (the value before
    each response token), computed without the last token (it precedes no response token) unless dropout is active
    (`team.forward`)."""
    if dropout_active(model.dropout_model if isinstance(model, AdapterCritic) else model):
        return sequence_scores(model, query_responses, pad_token_id, context_length)[0][:, context_length - 1 : -1]
    backbone, score = _backbone_and_head(model)
    output = backbone(
        **sequence_model_inputs(query_responses[:, :-1], pad_token_id),
        return_dict=True,
        output_hidden_states=True,
        use_cache=False,
    )
    return score(output.hidden_states[-1][:, context_length - 1 :]).squeeze(-1)


def check_single_label(model: nn.Module, name: str) -> None:
    """A reward or value model must be a transformers sequence classifier with one output."""
    labels = getattr(getattr(model, "config", None), "num_labels", None)
    if labels != 1:
        raise ValueError(
            f"`{name}` must be a sequence classifier with one output (`num_labels=1`), got num_labels={labels}: "
            "load it with `AutoModelForSequenceClassification.from_pretrained(..., num_labels=1)`."
        )
    if not hasattr(model, "score") or not hasattr(model, "base_model_prefix"):
        raise ValueError(f"`{name}` needs a `score` head and a `base_model_prefix` backbone (a transformers model).")


def check_joint_tokenizers(tokenizers: Sequence[Any]) -> None:
    """The centralized critic reads every agent's tokens in one sequence: the agents must share one vocabulary."""
    vocab = tokenizers[0].get_vocab()
    for a, tok in enumerate(tokenizers[1:], start=1):
        if tok.get_vocab() != vocab:
            raise ValueError(
                f"`critic='centralized'` reads every agent's prompt and response as one token sequence, but agent "
                f"{a}'s tokenizer has another vocabulary than agent 0's. Use agents with one tokenizer, or "
                "`critic='per_agent'` (IAC)."
            )


def build_value_models(value_model: nn.Module | Sequence[nn.Module] | None, team: AgentTeam,
                       policy_sharing: str = "agent", critic: str = "per_agent",
                       train_layers: int | None = None) -> list[nn.Module]:
    """One value model per policy slot, or a single one when every agent shares one policy or the critic is
    centralized (MAAC).

    Default: a fresh one-label head on a copy of each policy's base weights (policy 0's for a single one), training
    every weight, or with `train_layers` only its top layers and head ([`freeze_below_top_layers`]); its
    `config._name_or_path` names the policy's base model, where its frozen weights come from.
    """
    n = 1 if policy_sharing == "shared" or critic == "centralized" else team.num_agents
    if value_model is None:
        from transformers import AutoModelForSequenceClassification

        models = []
        for a in range(n):
            base = team.base_model_of(a)
            if is_partitioned(base):
                raise ValueError(
                    f"Agent {a}'s weights were partitioned by DeepSpeed ZeRO-3 when they were loaded, so the default "
                    "value model (a copy of the policy's weights with a new head) cannot be built from them: pass "
                    "`value_model=AutoModelForSequenceClassification.from_pretrained(..., num_labels=1)` (loaded "
                    "under the same ZeRO-3 config), or use ZeRO-2 / FSDP2."
                )
            if getattr(base, "is_quantized", False):
                raise ValueError(
                    f"Agent {a}'s policy is quantized, so the default value model (a copy of the policy's "
                    "weights with a new head) cannot be built from it: pass `value_model=AutoModelFor"
                    "SequenceClassification.from_pretrained(..., num_labels=1)`."
                )
            full = base_state_dict(team.policy(a)) if team.agent_adapter[a] is not None else base.state_dict()
            prefix = base.base_model_prefix + "."
            vm_config = base.config.__class__.from_dict(base.config.to_dict())
            vm_config.num_labels = 1  # `from_config(config, num_labels=1)` passes it to __init__: TypeError
            vm = AutoModelForSequenceClassification.from_config(vm_config)
            getattr(vm, vm.base_model_prefix).load_state_dict(
                {k[len(prefix) :]: v for k, v in full.items() if k.startswith(prefix)}, strict=True
            )
            vm.config._name_or_path = base.config._name_or_path  # the source of its frozen weights, if any
            if train_layers is not None:
                freeze_below_top_layers(vm, train_layers)
            models.append(vm.to(next(base.parameters()).device))
        return models
    models = list(value_model) if isinstance(value_model, (list, tuple)) else [value_model]
    if len(models) == 1 and n > 1:
        models = models + [copy.deepcopy(models[0]) for _ in range(n - 1)]
    if len(models) != n:
        raise ValueError(
            f"Got {len(models)} value models for {n} critics (policy_sharing={policy_sharing!r}, critic={critic!r}): "
            "pass one, or one per critic."
        )
    for vm in models:
        check_single_label(vm, "value_model")
    return models


def decoder_layers(model: PreTrainedModel) -> nn.ModuleList:
    """The decoder layers of a transformers model's backbone: its `nn.ModuleList` of `num_hidden_layers` modules."""
    backbone = getattr(model, model.base_model_prefix, model)
    count = getattr(model.config, "num_hidden_layers", None)
    for child in backbone.children():
        if isinstance(child, nn.ModuleList) and len(child) == count:
            return child
    raise ValueError(f"`value_train_layers` needs the decoder layers of {type(model).__name__}, a list of "
                     f"`num_hidden_layers` ({count}) modules in its backbone, which it does not have: pass "
                     "`value_model=` with the weights you want trained, or leave `value_train_layers` unset.")


def freeze_below_top_layers(model: PreTrainedModel, top_layers: int) -> PreTrainedModel:
    """Train only `model`'s top `top_layers` decoder layers, what its backbone has besides the layers and the input
    embeddings (the final norm), and its score head; freeze the rest (the input embeddings and the lower layers).
    Returns `model`."""
    layers = decoder_layers(model)
    backbone = getattr(model, model.base_model_prefix)
    embeddings = model.get_input_embeddings()
    model.requires_grad_(False)
    for layer in list(layers)[len(layers) - min(top_layers, len(layers)):]:
        layer.requires_grad_(True)
    for child in backbone.children():
        if child is not layers and child is not embeddings:
            child.requires_grad_(True)
    for name, child in model.named_children():
        if name != model.base_model_prefix:
            child.requires_grad_(True)  # the score head
    return model


VALUE_MODEL_INFO = "value_model.json"
"""In a value model folder saved without its frozen weights: `{"format": 1, "base_model": name or path, "dtype":
..., "tensors": [saved tensor names]}`; the tensors are in `trainable.safetensors` ([`save_value_model`])."""

_TRAINABLE_FILE = "trainable.safetensors"
_SOURCE_VERDICTS: weakref.WeakKeyDictionary[nn.Module, dict[str, frozenset[str]]] = weakref.WeakKeyDictionary()


def _source_tensors(name: str) -> dict[str, tuple[str, str]]:
    """The tensors of a saved model (`name`: a registered name or a folder) as `{tensor name: (file, name)}`, read
    from its safetensors files; empty where there are none (a Hub id that is not on this machine, a `.bin` model)."""
    from ...utils.model_names import resolve_model_name

    try:
        folder = resolve_model_name(name)
    except Exception:  # noqa: BLE001 - an unknown name: no source, the value model is saved whole
        return {}
    if not os.path.isdir(folder):
        return {}
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as handle:
            weight_map = json.load(handle).get("weight_map", {})
        return {key: (os.path.join(folder, file), key) for key, file in weight_map.items()}
    single = os.path.join(folder, "model.safetensors")
    if not os.path.isfile(single):
        return {}
    from safetensors import safe_open

    with safe_open(single, "pt") as handle:
        return {key: (single, key) for key in handle.keys()}  # noqa: SIM118 - safe_open is not a mapping


def _frozen_from_source(model: nn.Module, state: dict[str, torch.Tensor], frozen: Iterable[str]) -> frozenset[str]:
    """Which of the `frozen` tensors of `model` (values in `state`) its base model (`config._name_or_path`) holds
    with exactly these values (after a cast to their dtype): those can be left out of a save. Checked once per model
    and base (frozen weights do not change)."""
    source = str(getattr(model.config, "_name_or_path", "") or "")
    verdicts = _SOURCE_VERDICTS.setdefault(model, {})
    if source not in verdicts:
        from safetensors import safe_open

        tensors = _source_tensors(source) if source else {}
        same = set()
        by_file: dict[str, list[str]] = {}
        for name in frozen:
            if name in tensors:
                by_file.setdefault(tensors[name][0], []).append(name)
        for file, names in by_file.items():
            with safe_open(file, "pt") as handle:
                for name in names:
                    mine = state[name].detach().cpu()
                    theirs = handle.get_tensor(tensors[name][1])
                    if theirs.shape == mine.shape and torch.equal(theirs.to(mine.dtype), mine):
                        same.add(name)
        verdicts[source] = frozenset(same)
    return verdicts[source]


def save_value_model(model: PreTrainedModel, folder: str,
                     state_dict: dict[str, torch.Tensor] | None = None) -> list[str]:
    """Save a value model to `folder`: whole when it trains every weight (or nothing of it can be restored from its
    base model), else its trainable tensors and the frozen ones its base does not hold, with `config.json` and
    [`VALUE_MODEL_INFO`] (module docstring). `state_dict` replaces the model's own weights (e.g. FSDP's gathered
    ones). Returns the names of the tensors written."""
    state = dict(state_dict) if state_dict is not None else model.state_dict()
    frozen = [name for name, parameter in model.named_parameters() if not parameter.requires_grad and name in state]
    omitted = _frozen_from_source(model, state, frozen) if frozen else frozenset()
    if not omitted:
        model.save_pretrained(folder, state_dict=state)
        return list(state)
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    kept = {name: value.detach().cpu().contiguous() for name, value in state.items() if name not in omitted}
    save_file(kept, os.path.join(folder, _TRAINABLE_FILE), metadata={"format": "pt"})
    model.config.save_pretrained(folder)
    dtype = str(state[next(iter(omitted))].dtype).replace("torch.", "")  # the left-out weights' dtype
    with open(os.path.join(folder, VALUE_MODEL_INFO), "w") as handle:
        json.dump({"format": 1, "base_model": model.config._name_or_path, "dtype": dtype, "tensors": sorted(kept)},
                  handle, indent=2)
    return sorted(kept)


def load_value_model(folder: str | os.PathLike[str], base_model: str | None = None, **kwargs: Any) -> nn.Module:
    """A value model saved by a trainer (`value_model_<i>/` of a checkpoint or of `save_model`): loaded whole, or,
    when it was saved without its frozen weights ([`VALUE_MODEL_INFO`]), its base model's weights (cast to the
    saved dtype) with the saved tensors on top; an adapter critic (`value_adapter=True`) as a PEFT sequence
    classifier on its base model (`base_model`, default the one its `adapter_config.json` names). `kwargs` go to
    `from_pretrained`. Pass the result back as `value_model=` to train on (either kind of critic)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from ...utils.model_names import resolve_model_name

    folder = os.fspath(folder)
    if os.path.isfile(os.path.join(folder, "adapter_config.json")):
        return _load_adapter_critic(folder, base_model, **kwargs)
    info_path = os.path.join(folder, VALUE_MODEL_INFO)
    if not os.path.isfile(info_path):
        return AutoModelForSequenceClassification.from_pretrained(folder, **kwargs)
    with open(info_path) as handle:
        info = json.load(handle)
    from safetensors.torch import load_file

    config = AutoConfig.from_pretrained(folder)
    kwargs.setdefault("dtype", getattr(torch, info["dtype"]))
    model = AutoModelForSequenceClassification.from_pretrained(resolve_model_name(info["base_model"]), config=config,
                                                               **kwargs)
    saved = load_file(os.path.join(folder, _TRAINABLE_FILE))
    result = model.load_state_dict(saved, strict=False)
    if result.unexpected_keys:
        raise ValueError(f"{folder}: tensors that {type(model).__name__} does not have: {result.unexpected_keys}.")
    model.config._name_or_path = info["base_model"]
    return model


def _load_adapter_critic(folder: str, base_model: str | None, **kwargs: Any) -> nn.Module:
    """[`load_value_model`] of an adapter critic: its base as a one-label sequence classifier, the adapter on top."""
    from peft import PeftConfig, PeftModel
    from transformers import AutoModelForSequenceClassification

    from ...utils.model_names import resolve_model_name

    base = base_model or PeftConfig.from_pretrained(folder).base_model_name_or_path
    if not base:
        raise ValueError(f"{folder} is an adapter critic whose base model has no name or path (a model built in "
                         "memory): pass `base_model=` (e.g. the checkpoint's `base_model/` folder).")
    kwargs.setdefault("num_labels", 1)
    classifier = AutoModelForSequenceClassification.from_pretrained(resolve_model_name(base), **kwargs)
    return PeftModel.from_pretrained(classifier, folder, is_trainable=True)


_WEIGHT_FILES = (_TRAINABLE_FILE, ADAPTER_FILE, "model.safetensors", "model.safetensors.index.json")
"""The weight file of a value model saved by [`save_value_model`] (alternatives): its trainable tensors, an adapter
critic ([`AdapterCritic.save`]), or the whole model (one file or a sharded index)."""


def value_model_folder(index: int) -> str:
    """The folder of value model `index` in a checkpoint or a saved team."""
    return f"value_model_{index}"


def value_model_files(folder: str) -> tuple[str, ...]:
    """The weight file of a value model saved in `folder` (`/`-joined alternatives, [`_WEIGHT_FILES`])."""
    return tuple(f"{folder}/{name}" for name in _WEIGHT_FILES)


def saved_value_tensors(folder: str) -> dict[str, torch.Tensor]:
    """The tensors [`save_value_model`] wrote to `folder`: its trainable tensors, or every tensor of a whole model
    (one file or the shards of an index).

    Raises:
        FileNotFoundError: `folder` holds none of them.
    """
    from safetensors.torch import load_file

    *single, sharded = _WEIGHT_FILES
    for name in single:
        if os.path.isfile(os.path.join(folder, name)):
            return load_file(os.path.join(folder, name))
    index = os.path.join(folder, sharded)
    if not os.path.isfile(index):
        raise FileNotFoundError(f"{folder} holds no saved value model ({', '.join(_WEIGHT_FILES)}).")
    with open(index) as handle:
        shards = sorted(set(json.load(handle)["weight_map"].values()))
    tensors: dict[str, torch.Tensor] = {}
    for shard in shards:
        tensors.update(load_file(os.path.join(folder, shard)))
    return tensors


class PolicyValueTeam(nn.Module):
    """The trainable modules of PPO in one `nn.Module`: the team's policies and their value models.

    Its `forward` runs every slot's policy and value model on that slot's micro-batch, so one
    DistributedDataParallel wrapper sees one forward per backward. `value_index[s]` is the value model of policy
    slot `s` (one per slot, or one for the whole team when it shares one policy). Log-probabilities come from the
    team ([`AgentTeam.sequence_logits`]), which also gives the reference policy of every layout.
    """

    def __init__(self, team: AgentTeam, value_models: Sequence[nn.Module],
                 value_index: Sequence[int] | None = None) -> None:
        super().__init__()
        self.team = team
        self.value_models = nn.ModuleList(value_models)
        self.value_index = list(value_index) if value_index is not None else list(range(len(value_models)))

    @property
    def _no_split_modules(self) -> list[str]:
        """The layer classes of the policies and value models (FSDP shards each such layer as a unit)."""
        return no_split_modules([*self.team.models, *self.value_models])

    def save_value_models(self, output_dir: str, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """Save value model `i` to `output_dir/value_model_<i>/` ([`save_value_model`]: without the frozen weights
        that its base model holds), from `state_dict` (keyed as this module's `state_dict()`, e.g. the full weights
        FSDP gathered) when given, else from its own weights."""
        for index, model in enumerate(self.value_models):
            prefix = f"value_models.{index}."
            own = None if state_dict is None else {
                key[len(prefix):]: value for key, value in state_dict.items() if key.startswith(prefix)}
            if isinstance(model, AdapterCritic):  # its adapter's tensors are the team model's
                team_prefix = f"team.models.{model.model_index}."
                lora = None if state_dict is None else {
                    key[len(team_prefix):]: value for key, value in state_dict.items() if key.startswith(team_prefix)}
                model.save(os.path.join(output_dir, value_model_folder(index)), lora,
                           None if own is None else own["score.weight"])
                continue
            # a transformers sequence classifier (`check_single_label`), which `nn.ModuleList` types as a module
            save_value_model(cast("PreTrainedModel", model), os.path.join(output_dir, value_model_folder(index)), own)

    def load_value_models_(self, checkpoint_dir: str) -> None:
        """Load every value model's trained weights in place from `checkpoint_dir/value_model_<i>/` (written by
        [`save_value_models`]), to resume training: every tensor the model trains must be there; the frozen ones a
        checkpoint leaves out keep their values (the same base model's).

        Raises:
            ValueError: A saved tensor does not fit the model, or a trained tensor is missing.
        """
        for index, model in enumerate(self.value_models):
            folder = os.path.join(checkpoint_dir, value_model_folder(index))
            if isinstance(model, AdapterCritic):
                model.load_(folder)
                continue
            saved = saved_value_tensors(folder)
            trained = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
            missing = sorted(trained - set(saved))
            result = model.load_state_dict(saved, strict=False)
            if result.unexpected_keys or missing:
                raise ValueError(f"{folder} does not fit value model {index} ({type(model).__name__}): tensors it "
                                 f"does not have {result.unexpected_keys}, trained tensors missing {missing}.")

    def value_model(self, slot: int) -> nn.Module:
        """The value model of policy slot `slot`."""
        return self.value_models[self.value_index[slot]]

    @property
    def config(self) -> Any:
        return self.team.config

    def activation_checkpointing_enable(self, **kwargs: Any) -> None:
        self.team.activation_checkpointing_enable(**kwargs)

    gradient_checkpointing_enable = activation_checkpointing_enable

    def policy_logits(self, slot: int, query_responses: torch.Tensor, pad_token_id: int) -> torch.Tensor:
        """Slot `slot`'s policy logits over PPO's layout (every position, not divided by the temperature)."""
        return self.team.sequence_logits(slot, query_responses, pad_token_id)

    def forward(
        self,
        batches: Sequence[tuple[torch.Tensor, int, torch.Tensor, torch.Tensor, int] | None],
        pad_token_ids: Sequence[int] = (),
        temperature: float = 1.0,
    ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None]:
        """For each slot's `(query_responses, context, responses, value_query_responses, value_context)`:
        `(entropies, new log-probs, values)` of its policy (per response position; the entropies detached) and
        value model (nothing for no batches: `model([])` is how FSDP2 learns that this module is its root,
        `trainers.distributed`)."""
        outputs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None] = []
        for s, batch in enumerate(batches):
            if batch is None:
                outputs.append(None)
                continue
            query_responses, context, responses, value_qr, value_context = batch
            # the log-probs outside the model's forward (autocast off) as in TRL 1.12; the entropies are detached
            logprobs, entropy = self.team.response_logprobs(s, query_responses, context, pad_token_ids[s], responses,
                                                            logit_temperature(temperature), compute_entropy=True)
            if entropy is None:  # asked for (`compute_entropy=True`): never None
                raise RuntimeError("`AgentTeam.response_logprobs(compute_entropy=True)` returned no entropies.")
            values = response_values(self.value_model(s), value_qr, pad_token_ids[s], value_context)
            # no view among the outputs: under FSDP2 this module is the root (`team.forward.own_storage`)
            outputs.append((own_storage(entropy), own_storage(logprobs), own_storage(values)))
        return outputs

