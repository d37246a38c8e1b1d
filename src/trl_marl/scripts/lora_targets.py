"""LoRA target modules that fit the model a script trains, whichever model family the config was written for.

The example configs name the projections of their own model: `maporl_gsm8k.yaml` Phi-3's fused `qkv_proj` and
`gate_up_proj`, the others Qwen2's separate `q_proj`, `k_proj`, `v_proj`, `gate_proj`, `up_proj`. Run with another
model (`--model_name_or_path smollm2-135m-instruct`, a Llama), a fused name has no module to wrap, and PEFT stops
with "Target modules ... not found in the base model". [`fit_lora_targets`] maps each target the model lacks to the
model's modules that do the same work ([`SAME_WORK`]: a fused projection and its parts), says so in one line, and
refuses a target with no such counterpart with an error that names `lora_target_modules`, the model's Linear layers
and `all-linear`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..utils.quiet import say

SAME_WORK: tuple[tuple[str, ...], ...] = (
    ("qkv_proj", "query_key_value", "Wqkv", "q_proj", "k_proj", "v_proj"),  # the attention's input projections
    ("gate_up_proj", "gate_proj", "up_proj"),  # the MLP's input projections (gated)
)
"""Groups of module names that do the same work in different model families: Phi-3 `qkv_proj`, GPT-NeoX/Falcon
`query_key_value` and MPT `Wqkv` are one fused projection whose parts are Llama/Qwen/Mistral's `q_proj`, `k_proj`,
`v_proj`; Phi-3's `gate_up_proj` is `gate_proj` + `up_proj`. Names shared across families (`o_proj`, `down_proj`)
need no entry."""


def short_names(module_names: Iterable[str]) -> set[str]:
    """The last part of each dotted module name (`model.layers.0.self_attn.q_proj` -> `q_proj`)."""
    return {name.rsplit(".", 1)[-1] for name in module_names if name}


def translate_targets(targets: list[str], available: set[str]) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """Map LoRA `targets` onto the module names `available` in a model.

    Returns:
        `(fitted, translated, unknown)`: the targets to use (in order, without repeats), the targets that were
        replaced and by what, and the targets with no counterpart in the model.
    """
    fitted: list[str] = []
    translated: dict[str, list[str]] = {}
    unknown: list[str] = []
    for target in targets:
        if target in available:
            replacement = [target]
        else:
            group = next((g for g in SAME_WORK if target in g), ())
            replacement = [name for name in group if name in available and name != target]
            if not replacement:
                unknown.append(target)
                continue
            translated[target] = replacement
        fitted += [name for name in replacement if name not in fitted]
    return fitted, translated, unknown


def model_module_names(path: str) -> tuple[list[str], str]:
    """The module names of the causal LM at `path` (a folder or a Hub id the cache holds) and its class name, from
    its config alone: the model is built on the `meta` device (no weights read, no memory used)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return [name for name, _ in model.named_modules()], type(model).__name__


def linear_names(module_names: Iterable[str]) -> list[str]:
    """The short names that look like projections (for the message: the model's candidates)."""
    return sorted(n for n in short_names(module_names) if n.endswith(("proj", "_key_value", "qkv", "dense", "fc1",
                                                                        "fc2", "c_attn", "c_fc", "c_proj")))


def fit_lora_targets(model_args: Any, module_names: Iterable[str], model_label: str) -> None:
    """Fit `model_args.lora_target_modules` (TRL's `ModelConfig`) to a model whose modules are `module_names`.

    Nothing to do without `use_peft`, without targets, or for `all-linear`. A single name from the command line
    (TRL turns `--lora_target_modules q_proj` into the string `"q_proj"`, which PEFT would read as a regular
    expression over whole module paths) is read as a one-name list. Targets the model lacks are replaced by the
    modules of [`SAME_WORK`] it has, and a line says so.

    Raises:
        ValueError: A target matches no module and has no counterpart: the message names `lora_target_modules`, the
            model's projections and `all-linear`.
    """
    targets = model_args.lora_target_modules
    if not getattr(model_args, "use_peft", False) or not targets or targets == "all-linear":
        return
    if isinstance(targets, str):
        if not targets.replace("_", "").isalnum():
            return  # a regular expression over module paths: PEFT's to match
        targets = [targets]
    available = short_names(module_names)
    fitted, translated, unknown = translate_targets(list(targets), available)
    if unknown:
        raise ValueError(
            f"`lora_target_modules` {unknown} match no module of {model_label}. Its projections are: "
            f"{', '.join(linear_names(module_names))}. Pass names from that list (`--lora_target_modules q_proj "
            "v_proj`), or `--lora_target_modules all-linear` for every Linear layer."
        )
    if translated:
        said = "; ".join(f"{name} -> {', '.join(parts)}" for name, parts in translated.items())
        say(f"[trl-marl] LoRA targets fitted to {model_label}: {said} (`lora_target_modules` names another "
            "model family's projections; the same layers here)")
    model_args.lora_target_modules = fitted
