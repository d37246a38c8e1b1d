"""`AutoModelForCausalLMWithValueHead`: a causal LM plus a scalar value head, saved as TRL 0.11 saves it.

File layout (what TRL 0.11 reads and writes, so a model saved by either loads in the other):

- full model: the LM's own files, with the head's `v_head.summary.weight` and `v_head.summary.bias` stored in the
  same `model.safetensors` (or `pytorch_model.bin`);
- PEFT model: the adapter's files (`adapter_config.json`, `adapter_model.safetensors`) plus a `pytorch_model.bin`
  that holds only the `v_head.*` tensors.
"""

from __future__ import annotations

import copy
import json
import os
import re
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from transformers import AutoModelForCausalLM, GenerationMixin, PreTrainedModel

from ..utils.model_names import resolve_model_name
from ..utils.quiet import peft_quietly

if TYPE_CHECKING:
    from peft import PeftModel
    from typing_extensions import TypeIs

V_HEAD_PREFIX = "v_head."
VALUE_HEAD_ARGS = ("summary_dropout_prob", "v_head_initializer_range", "v_head_init_strategy")
_LAYER_NAME = re.compile(r"\.(?:h|layers|layer|blocks|block)\.(\d+)\.")


def _is_peft(model: object) -> TypeIs[PeftModel]:
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        return False
    return isinstance(model, PeftModel)


class ValueHead(nn.Module):
    """Maps a hidden state to a scalar value: dropout, then `summary = Linear(hidden_size, 1)`.

    Args:
        hidden_size: Width of the hidden states.
        summary_dropout_prob: Dropout before the linear layer (0 or None: none).

    Example:
        >>> head = ValueHead(8, summary_dropout_prob=0.0)
        >>> head(torch.zeros(2, 3, 8)).shape
        torch.Size([2, 3, 1])
    """

    def __init__(self, hidden_size: int, summary_dropout_prob: float | None = 0.1) -> None:
        super().__init__()
        self.dropout = nn.Dropout(summary_dropout_prob) if summary_dropout_prob else nn.Identity()
        self.summary = nn.Linear(hidden_size, 1)
        self.flatten = nn.Flatten()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Values `(..., 1)` of the hidden states `(..., hidden_size)`, in the head's dtype."""
        hidden = self.dropout(hidden_states)
        return self.summary(hidden.to(self.summary.weight.dtype))


def _hidden_size(config: Any) -> int:
    for name in ("word_embed_proj_dim", "hidden_size", "n_embd", "d_model"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    text = config.get_text_config() if hasattr(config, "get_text_config") else None
    if text is not None and text is not config:
        return _hidden_size(text)
    raise ValueError(f"Cannot tell the hidden size of a {type(config).__name__}.")


class AutoModelForCausalLMWithValueHead(nn.Module):
    """A causal language model with a value head, the policy and value model of the classic `PPOTrainer`.

    `forward` returns `(lm_logits, loss, values)` like TRL 0.11's class; `pretrained_model` is the wrapped model (a
    `PeftModel` when LoRA is used; the reference policy is then the same model with its adapters disabled).

    Args:
        pretrained_model: A causal LM (`transformers.PreTrainedModel` or `peft.PeftModel`).
        summary_dropout_prob: Dropout of the value head (default: the config's `summary_dropout_prob`, else 0.1).
        v_head_initializer_range: Std of the `"normal"` initialisation.
        v_head_init_strategy: None (PyTorch's default `Linear` init) or `"normal"` (normal weights, zero bias).

    Example:
        ```python
        from peft import LoraConfig
        from trl_marl.legacy import AutoModelForCausalLMWithValueHead

        model = AutoModelForCausalLMWithValueHead.from_pretrained("gpt2")
        lora = AutoModelForCausalLMWithValueHead.from_pretrained("gpt2", peft_config=LoraConfig(r=8))
        model.save_pretrained("out")  # out/model.safetensors holds the LM and v_head.summary.*
        ```
    """

    transformers_parent_class = AutoModelForCausalLM
    lm_head_namings = ("lm_head", "embed_out")
    supported_args = VALUE_HEAD_ARGS

    def __init__(
        self,
        pretrained_model: PreTrainedModel | PeftModel,
        summary_dropout_prob: float | None = None,
        v_head_initializer_range: float = 0.2,
        v_head_init_strategy: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.pretrained_model = pretrained_model
        self.config = pretrained_model.config
        self.is_peft_model = _is_peft(pretrained_model)
        self.is_encoder_decoder = False
        # (PEFT types its base model as an `nn.Module`)
        base = cast(PreTrainedModel, pretrained_model.get_base_model()) if _is_peft(pretrained_model) \
            else pretrained_model
        if base.get_output_embeddings() is None and not any(hasattr(base, n) for n in self.lm_head_namings):
            raise ValueError("The model has no language-model head: wrap a causal LM.")
        if summary_dropout_prob is None:
            summary_dropout_prob = getattr(self.config, "summary_dropout_prob", 0.1)
        self.v_head = ValueHead(_hidden_size(self.config), summary_dropout_prob)
        if v_head_init_strategy == "normal":
            nn.init.normal_(self.v_head.summary.weight, mean=0.0, std=v_head_initializer_range)
            nn.init.zeros_(self.v_head.summary.bias)
        elif v_head_init_strategy is not None:
            raise ValueError(f"Unknown v_head_init_strategy {v_head_init_strategy!r}; use None or 'normal'.")
        self.v_head.to(next(pretrained_model.parameters()).device)

    # ------------------------------------------------------------------ forward / generate
    def forward(
        self, input_ids: torch.Tensor | None = None, past_key_values: Any = None,
        attention_mask: torch.Tensor | None = None, return_past_key_values: bool = False, **kwargs: Any,
    ) -> tuple:
        """`(lm_logits, loss, values)` (plus the cache with `return_past_key_values`); values have shape `(B, L)`."""
        if past_key_values is not None:
            kwargs["past_key_values"] = past_key_values
        out = self.pretrained_model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                                    **kwargs)
        hidden = out.hidden_states[-1]
        values = self.v_head(hidden.to(self.v_head.summary.weight.device)).squeeze(-1)
        logits = out.logits if out.logits.dtype == torch.float32 else out.logits.float()
        if return_past_key_values:
            return logits, out.loss, values, out.past_key_values
        return logits, out.loss, values

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """`generate` of the wrapped model."""
        # (a causal LM, or a PeftModel around one: transformers' `PreTrainedModel` type has no `generate`)
        return cast(GenerationMixin, self.pretrained_model).generate(*args, **kwargs)

    def gradient_checkpointing_enable(self, **kwargs: Any) -> None:
        """Enable gradient checkpointing in the wrapped model."""
        self.pretrained_model.gradient_checkpointing_enable(**kwargs)

    # ------------------------------------------------------------------ state
    # (a new dict, whatever `destination` `nn.Module.state_dict`'s overloads promise to return)
    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """The wrapped model's state (empty for a PEFT model) plus the head's under `v_head.`."""
        state = {} if self.is_peft_model else dict(self.pretrained_model.state_dict(*args, **kwargs))
        for key, value in self.v_head.state_dict().items():
            state[V_HEAD_PREFIX + key] = value
        return state

    def load_v_head_(self, state: dict[str, torch.Tensor]) -> bool:
        """Load the `v_head.*` entries of `state` into the head; returns whether any was found."""
        head = {k[len(V_HEAD_PREFIX):]: v for k, v in state.items() if k.startswith(V_HEAD_PREFIX)}
        if not head:
            return False
        self.v_head.load_state_dict(head, strict=True)
        return True

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs: Any) -> None:
        """Save the model and the value head in TRL 0.11's layout (see the module docstring)."""
        save_directory = os.fspath(save_directory)
        os.makedirs(save_directory, exist_ok=True)
        kwargs.pop("state_dict", None)
        head = {V_HEAD_PREFIX + k: v.detach().cpu().contiguous() for k, v in self.v_head.state_dict().items()}
        self.pretrained_model.save_pretrained(save_directory, **kwargs)
        if self.is_peft_model:
            torch.save(head, os.path.join(save_directory, "pytorch_model.bin"))
            return
        _add_tensors_to_checkpoint(save_directory, head)

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike | PreTrainedModel | PeftModel, *model_args: Any,
        peft_config: Any = None, is_trainable: bool = True, **kwargs: Any,
    ) -> AutoModelForCausalLMWithValueHead:
        """Load a model (a name, a folder saved by this class or by TRL 0.11, or a model object) and its head.

        Args:
            pretrained_model_name_or_path: Model id, local folder, or a `PreTrainedModel` / `PeftModel`.
            *model_args: Passed to `AutoModelForCausalLM.from_pretrained`.
            peft_config: A `peft.PeftConfig`: wrap the model with new adapters (ignored for a saved adapter folder).
            is_trainable: Load a saved adapter as trainable.
            **kwargs: The value-head options (`summary_dropout_prob`, `v_head_initializer_range`,
                `v_head_init_strategy`); everything else goes to `AutoModelForCausalLM.from_pretrained`.
        """
        head_kwargs = {k: kwargs.pop(k) for k in VALUE_HEAD_ARGS if k in kwargs}
        source = pretrained_model_name_or_path
        if isinstance(source, (str, os.PathLike)):
            path = resolve_model_name(os.fspath(source))  # a registered name ("smollm2-135m-instruct") -> folder
            model: PreTrainedModel | PeftModel
            if os.path.isfile(os.path.join(path, "adapter_config.json")):
                from peft import PeftConfig, PeftModel

                adapter_config = PeftConfig.from_pretrained(path)
                base = AutoModelForCausalLM.from_pretrained(resolve_model_name(adapter_config.base_model_name_or_path),
                                                            *model_args, **kwargs)
                with peft_quietly():
                    model = PeftModel.from_pretrained(base, path, is_trainable=is_trainable)
            else:
                loaded = AutoModelForCausalLM.from_pretrained(path, *model_args, **kwargs)
                if path != os.fspath(source):  # keep the registered name, not its cache folder
                    loaded.config.name_or_path = loaded.name_or_path = os.fspath(source)
                model = loaded
                if peft_config is not None:
                    from peft import get_peft_model

                    with peft_quietly():
                        model = get_peft_model(model, peft_config)
            wrapper = cls(model, **head_kwargs)
            state = _read_v_head(path) if os.path.isdir(path) else {}
            wrapper.load_v_head_(state)
            return wrapper
        model = source
        if peft_config is not None and not _is_peft(model):
            from peft import get_peft_model

            with peft_quietly():
                model = get_peft_model(model, peft_config)
        return cls(model, **head_kwargs)

    # ------------------------------------------------------------------ conveniences
    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "pretrained_model" or name.startswith("__"):
                raise
            return getattr(self.pretrained_model, name)


def _read_v_head(path: str) -> dict[str, torch.Tensor]:
    """The `v_head.*` tensors of a saved folder (single file or sharded, safetensors or pickle)."""
    from safetensors import safe_open

    found: dict[str, torch.Tensor] = {}
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index_file = os.path.join(path, index_name)
        if os.path.isfile(index_file):
            with open(index_file) as f:
                weight_map = json.load(f)["weight_map"]
            files = sorted({v for k, v in weight_map.items() if k.startswith(V_HEAD_PREFIX)})
            for name in files:
                found.update(_read_file_head(os.path.join(path, name), safe_open))
            if found:
                return found
    for name in ("model.safetensors", "pytorch_model.bin"):
        file = os.path.join(path, name)
        if os.path.isfile(file):
            found = _read_file_head(file, safe_open)
            if found:
                return found
    return found


def _read_file_head(file: str, safe_open: Any) -> dict[str, torch.Tensor]:
    if file.endswith(".safetensors"):
        with safe_open(file, framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys() if k.startswith(V_HEAD_PREFIX)}
    state = torch.load(file, map_location="cpu", weights_only=True)
    return {k: v for k, v in state.items() if k.startswith(V_HEAD_PREFIX)}


def _add_tensors_to_checkpoint(directory: str, tensors: dict[str, torch.Tensor]) -> None:
    """Add `tensors` to the checkpoint `save_pretrained` just wrote (the single file, or a new shard + index)."""
    from safetensors.torch import load_file, save_file

    safe_index = os.path.join(directory, "model.safetensors.index.json")
    single = os.path.join(directory, "model.safetensors")
    if os.path.isfile(safe_index):
        shard = "model-v_head.safetensors"
        save_file(tensors, os.path.join(directory, shard), metadata={"format": "pt"})
        with open(safe_index) as f:
            index = json.load(f)
        index["weight_map"].update({k: shard for k in tensors})
        with open(safe_index, "w") as f:
            json.dump(index, f, indent=2)
    elif os.path.isfile(single):
        state = load_file(single)
        state.update(tensors)
        save_file(state, single, metadata={"format": "pt"})
    else:
        legacy = os.path.join(directory, "pytorch_model.bin")
        state = torch.load(legacy, map_location="cpu", weights_only=True) if os.path.isfile(legacy) else {}
        state.update(tensors)
        torch.save(state, legacy)


def create_reference_model(
    model: AutoModelForCausalLMWithValueHead, num_shared_layers: int | None = None, pattern: str | None = None
) -> AutoModelForCausalLMWithValueHead:
    """A frozen copy of `model` (eval mode, no gradients): the reference policy of the KL penalty.

    With `num_shared_layers=n`, the parameters before layer `n` (embeddings and the first n blocks) are not copied:
    the reference uses the policy's own tensors, and they are frozen in the policy too, so both stay equal.

    Args:
        model: The policy.
        num_shared_layers: Number of leading layers to share (None: copy everything).
        pattern: Name of the first unshared layer's parameters with a `{layer}` placeholder (e.g.
            `"transformer.h.{layer}."`); default: detected from the usual layer names.

    Returns:
        The reference model.

    Example:
        ```python
        ref = create_reference_model(model)                       # a full frozen copy
        ref = create_reference_model(model, num_shared_layers=6)  # first 6 blocks shared and frozen
        ```
    """
    names = [n for n, _ in model.named_parameters()]
    shared: list[str] = []
    if num_shared_layers is not None:
        marker = pattern.format(layer=num_shared_layers) if pattern is not None else None
        for name in names:
            if marker is not None:
                if marker in name:
                    break
            else:
                match = _LAYER_NAME.search(name)
                if match is not None and int(match.group(1)) >= num_shared_layers:
                    break
            shared.append(name)
        if len(shared) == len(names):
            raise ValueError(f"No layer {num_shared_layers} found to stop sharing at; pass `pattern`.")
    ref = copy.deepcopy(model)
    for name in shared:
        param = model.get_parameter(name)
        param.requires_grad_(False)
        module_name, _, attr = name.rpartition(".")
        setattr(ref.get_submodule(module_name), attr, param)
    for param in ref.parameters():
        param.requires_grad_(False)
    return ref.eval()
