"""Token-level helpers shared by the team, the trainers and the rewards: padding, prompt tokenization, tokenizers.

Nothing here knows about agents: these are the small functions every layer above needs to turn prompts into token
ids and token ids into model inputs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, TypeGuard

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer

from .model_names import check_model_name, resolve_model_name

Prompt = str | list[dict[str, str]] | list[int]
"""A prompt: plain text, chat messages (`[{"role": ..., "content": ...}, ...]`) or token ids."""


def _round_up(width: int, multiple_of: int | None) -> int:
    return width if not multiple_of else -(-width // multiple_of) * multiple_of


def pad_left(sequences: Sequence[Sequence[int]], pad_id: int,
             multiple_of: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token id lists into `(ids, mask)` tensors (the width rounded up to `multiple_of`, when given)."""
    width = _round_up(max((len(s) for s in sequences), default=0), multiple_of)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        if len(seq):
            ids[i, width - len(seq):] = torch.as_tensor(seq, dtype=torch.long)
            mask[i, width - len(seq):] = 1
    return ids, mask


def pad_right(sequences: Sequence[Sequence[int]], pad_id: int,
              multiple_of: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token id lists into `(ids, mask)` tensors (at least one column wide; the width rounded up to
    `multiple_of`, when given)."""
    width = _round_up(max(1, max((len(s) for s in sequences), default=0)), multiple_of)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        ids[i, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        mask[i, : len(seq)] = 1
    return ids, mask


def sequence_model_inputs(query_responses: torch.Tensor, pad_token_id: int) -> dict[str, torch.Tensor]:
    """Inputs for a forward over left-padded query + right-padded response rows (pads masked, positions shifted).

    This is PPO's batch layout (TRL 1.12's): every pad token is masked, wherever it stands.
    """
    attention_mask = query_responses != pad_token_id
    position_ids = attention_mask.long().cumsum(1) - attention_mask.long()
    input_ids = torch.masked_fill(query_responses, ~attention_mask, 0)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}


def joint_model_inputs(batches: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(input_ids, attention_mask, position_ids)` of one forward over the rows of several batches of left-padded
    prompts and right-padded completions (`AgentBatch`es), in order, that scores every row as its own batch's forward
    does.

    A batch's own forward reads `prompt_ids + completion_ids[:, :-1]` at positions `0, 1, ...` (the model's default,
    left padding included) and scores the logits of its last `completion_ids.size(1)` positions. Here every batch is
    padded further on the left to the widest prompt and on the right to the widest completion, with masked zeros;
    the position ids keep each row's own numbering (the columns added on the left get position 0). The logits of a
    batch's completion are then the first `completion_ids.size(1)` of the last `max(widths)` positions.

    Example:

    ```python
    # one batch with a 3-token prompt and 2 completion tokens, one with a 1-token prompt and 3 completion tokens
    ids, mask, positions = joint_model_inputs([a, b])  # both rows 3 + 2 = 5 columns wide
    positions  # tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])
    ```
    """
    prompt_width = max(batch.prompt_ids.size(1) for batch in batches)
    completion_width = max(batch.completion_ids.size(1) for batch in batches)
    ids, masks, positions = [], [], []
    for batch in batches:
        left = prompt_width - batch.prompt_ids.size(1)
        right = completion_width - batch.completion_ids.size(1)
        pad = (left, right)
        ids.append(F.pad(torch.cat([batch.prompt_ids, batch.completion_ids[:, :-1]], dim=1), pad))
        masks.append(F.pad(torch.cat([batch.prompt_mask, batch.completion_mask[:, :-1]], dim=1), pad))
        width = ids[-1].size(1)
        row = torch.arange(-left, width - left, device=batch.prompt_ids.device).clamp(min=0)
        positions.append(row.expand(len(ids[-1]), -1))
    return torch.cat(ids), torch.cat(masks), torch.cat(positions)


def load_tokenizer(name_or_path: str | os.PathLike, **kwargs: Any) -> Any:
    """Load a tokenizer, honouring a generic fast tokenizer saved in a local folder.

    With transformers 5, `AutoTokenizer` picks the tokenizer class from the *model type* of a folder's
    `config.json` (a `qwen2` folder always gets `Qwen2Tokenizer`, which re-normalizes the text and drops the
    spaces of `trl_marl.toy`'s character-level tokenizer). A folder whose tokenizer was saved as a plain
    `tokenizers` backend is therefore loaded as exactly that; everything else goes through `AutoTokenizer`.
    A tokenizer without a pad token gets its EOS token as pad token. Registered model names (e.g. `"toy"`, see
    [`register_model_name_resolver`]) are resolved to their folder first.
    """
    from transformers import PreTrainedTokenizerFast

    check_model_name(os.fspath(name_or_path), "the tokenizer's model name")  # no Hub retries when it cannot load
    path = resolve_model_name(os.fspath(name_or_path))
    config_file = os.path.join(path, "tokenizer_config.json")
    saved_class = None
    if os.path.isfile(config_file):
        with open(config_file) as f:
            saved_class = json.load(f).get("tokenizer_class")
    if saved_class in ("TokenizersBackend", "PreTrainedTokenizerFast"):
        tokenizer = PreTrainedTokenizerFast.from_pretrained(path, **kwargs)
    else:
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def is_token_ids(prompt: Prompt) -> TypeGuard[Sequence[int]]:
    return isinstance(prompt, (list, tuple)) and len(prompt) > 0 and not isinstance(prompt[0], (dict, str))


def is_chat(prompt: Prompt) -> TypeGuard[list[dict[str, str]]]:
    """Whether a prompt is a conversation (a list of chat messages)."""
    return isinstance(prompt, list) and (len(prompt) == 0 or isinstance(prompt[0], dict))


def tokenize_prompts(
    tokenizer: Any, prompts: Sequence[Prompt], chat_template_kwargs: dict | None = None
) -> list[list[int]]:
    """Token ids of each prompt: chat messages through the chat template, strings through the tokenizer.

    This follows TRL's `GRPOTrainer`: plain strings are tokenized with the tokenizer's special tokens, chat
    messages with `apply_chat_template(..., add_generation_prompt=True)`. A conversation whose last message is the
    assistant's is a prefill (as in TRL's `apply_chat_template` of `trl.data_utils`): the template renders it with
    `continue_final_message=True` and the model continues that message, e.g. after `"My answer is"`.

    A prompt that repeats (the G samples of a GRPO group) is tokenized once, and every row gets its own copy of the
    ids; chat messages count as repeats when their fields are plain strings (others are all tokenized).
    """
    if not prompts:
        return []
    if is_token_ids(prompts[0]):  # already tokenized (e.g. a TRL PPO dataset's `input_ids`)
        return [[int(t) for t in ids] for ids in prompts]  # type: ignore[arg-type]  # (all are when the first is)
    keys = [_prompt_key(p) for p in prompts]
    if any(key is None for key in keys):
        return _tokenize(tokenizer, list(prompts), chat_template_kwargs)
    first: dict[Any, int] = {}
    for row, key in enumerate(keys):
        first.setdefault(key, row)
    distinct = _tokenize(tokenizer, [prompts[row] for row in first.values()], chat_template_kwargs)
    index = dict(zip(first, range(len(first))))
    return [list(distinct[index[key]]) for key in keys]


def _prompt_key(prompt: Prompt) -> Any:
    """A hashable stand-in for a text or plain-text chat prompt (equal keys: equal token ids), or None."""
    if isinstance(prompt, str):
        return prompt
    if is_chat(prompt) and all(isinstance(m, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                           for k, v in m.items()) for m in prompt):
        return tuple(tuple(m.items()) for m in prompt)
    return None


def _tokenize(tokenizer: Any, prompts: list[Prompt], chat_template_kwargs: dict | None) -> list[list[int]]:
    if not is_chat(prompts[0]):
        return [list(ids) for ids in tokenizer(text=prompts)["input_ids"]]
    # A conversation that ends with an assistant message is a prefill: the model continues that message (the
    # template's `continue_final_message`) instead of starting a new assistant turn after it.
    prefill = [bool(p) and p[-1].get("role") == "assistant" for p in prompts]  # type: ignore[union-attr]
    ids: list[list[int]] = [[] for _ in prompts]
    for continues in (False, True):
        rows = [i for i, flag in enumerate(prefill) if flag is continues]
        if not rows:
            continue
        out = tokenizer.apply_chat_template(
            conversation=[prompts[i] for i in rows], add_generation_prompt=not continues,
            continue_final_message=continues, tokenize=True, return_dict=True, **(chat_template_kwargs or {}),
        )
        for i, row_ids in zip(rows, out["input_ids"]):
            ids[i] = list(row_ids)
    return ids


def truncate_after_eos(ids: Sequence[int], eos_ids: set[int]) -> list[int]:
    """Keep tokens up to and including the first EOS (pad tokens after EOS never count)."""
    out = []
    for tok in ids:
        out.append(int(tok))
        if int(tok) in eos_ids:
            break
    return out
