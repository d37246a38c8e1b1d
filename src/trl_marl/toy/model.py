"""The toy tokenizer (one token per character) and tiny, deterministic Qwen2 models built from configuration."""

from __future__ import annotations

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

TOY_CHARS: str = "0123456789+-=?:TQA "
"""The character vocabulary of the toy tokenizer (every character is one token)."""

TOY_SPECIAL_TOKENS: dict[str, str] = {
    "pad_token": "<pad>",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
}
"""The special tokens of the toy tokenizer; they take the ids 0-3 in this order."""

TOY_CHAT_TEMPLATE: str = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% endfor %}"
)
"""A minimal chat template: the bos token followed by the concatenated message contents (no role markers)."""




TOY_CHAT_CHARS: str = "".join(chr(c) for c in range(32, 127)) + "\n"
"""The character vocabulary of the toy chat tokenizer: printable ASCII and the newline."""

TOY_CHAT_SPECIAL_TOKENS: dict[str, str] = {
    "pad_token": "<pad>",
    "bos_token": "<|im_start|>",
    "eos_token": "<|im_end|>",
    "unk_token": "<unk>",
}
"""The special tokens of the toy chat tokenizer (ChatML's markers, as SmolLM2-Instruct has them); ids 0-3."""


def _byte_level_chars(chars: str = TOY_CHARS) -> dict[str, str]:
    """Maps each character of :data:`TOY_CHARS` to its byte-level (GPT-2 style) token string.

    Returns:
        A dict from character to token string, e.g. ``" "`` to ``"Ġ"`` and ``"7"`` to ``"7"``.
    """
    mapping = {}
    for char in chars:
        pieces = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(char)
        (token, _span), *rest = pieces
        if rest or len(token) != 1:
            raise ValueError(f"toy characters must be single bytes: {char!r}")
        mapping[char] = token
    return mapping


def build_toy_tokenizer() -> PreTrainedTokenizerFast:
    """Builds the character-level toy tokenizer.

    The vocabulary is the four special tokens (``<pad>``, ``<s>``, ``</s>``, ``<unk>``, ids 0-3) followed by
    the characters of :data:`TOY_CHARS`. Every character, spaces included, is its own token, so encoding and
    decoding round-trip exactly. With ``add_special_tokens=True`` the bos token is prepended; padding is on the
    left. A minimal chat template concatenates message contents after the bos token.

    The vocabulary stores characters in their byte-level form (the space is ``"Ġ"``) and the text goes through a
    byte-level pre-tokenizer and decoder. This matters once the tokenizer is saved next to a Qwen2 ``config.json``:
    transformers 5 then loads it with ``AutoTokenizer`` as a ``Qwen2Tokenizer``, which rebuilds a byte-level BPE
    pipeline from the saved vocabulary (and has no merges here). With byte-level tokens that pipeline tokenizes
    exactly like this tokenizer; with a literal ``" "`` token it would drop every space.

    Returns:
        The tokenizer. It can be saved with ``save_pretrained`` and reloaded with
        ``AutoTokenizer.from_pretrained``, alone or next to a toy model.
    """
    backend, vocab = _character_backend(TOY_CHARS, TOY_SPECIAL_TOKENS)
    bos = TOY_SPECIAL_TOKENS["bos_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A",
        pair=f"{bos} $A {bos} $B",
        special_tokens=[(bos, vocab[bos])],
    )
    tokenizer = _fast_tokenizer(backend, TOY_SPECIAL_TOKENS)
    tokenizer.chat_template = TOY_CHAT_TEMPLATE
    return tokenizer


def _character_backend(chars: str, specials: dict[str, str]) -> tuple[Tokenizer, dict[str, int]]:
    """A `tokenizers` backend with one token per character of `chars` after the special tokens, and its vocabulary.

    Every character (spaces included) is split into its own piece, then mapped to its byte-level form; the decoder
    maps the byte-level tokens back to text and joins them without inserting spaces.
    """
    byte_level = _byte_level_chars(chars)
    vocab = {token: index for index, token in enumerate([*specials.values(), *(byte_level[c] for c in chars)])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=specials["unk_token"]))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    return backend, vocab


def _fast_tokenizer(backend: Tokenizer, specials: dict[str, str]) -> PreTrainedTokenizerFast:
    """`backend` as a transformers tokenizer that pads on the left."""
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, clean_up_tokenization_spaces=False,
                                        padding_side="left", model_max_length=1024, **specials)
    tokenizer.padding_side = "left"
    return tokenizer


def build_toy_chat_tokenizer() -> PreTrainedTokenizerFast:
    """Builds a character-level ChatML tokenizer whose chat template can express tool calls.

    Like :func:`build_toy_tokenizer` (one token per character, byte-level form, left padding) over
    :data:`TOY_CHAT_CHARS`, with ChatML's `<|im_start|>`/`<|im_end|>` as special tokens (`<|im_end|>` ends a
    message and is the EOS) and `trl_marl.tools.CHATML_TOOL_TEMPLATE` with its response parser, so that tests of
    tool-using agents (and TRL's `GRPOTrainer(tools=...)`) can run on a tiny model: pair it with
    :func:`build_toy_model`.

    Returns:
        The tokenizer.
    """
    from ..tools.templates import use_tool_chat_template

    backend, _ = _character_backend(TOY_CHAT_CHARS, TOY_CHAT_SPECIAL_TOKENS)
    return use_tool_chat_template(_fast_tokenizer(backend, TOY_CHAT_SPECIAL_TOKENS))


def build_toy_model(
    tokenizer: PreTrainedTokenizerBase,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
    max_position_embeddings: int = 128,
) -> Qwen2ForCausalLM:
    """Builds a small, randomly initialised Qwen2 causal language model for the toy tokenizer.

    Args:
        tokenizer: The tokenizer (usually from :func:`build_toy_tokenizer`); its length sets the vocabulary size
            and its pad/bos/eos ids are copied into the model and generation configs.
        hidden_size: Width of the model; must be divisible by ``num_heads``.
        num_layers: Number of decoder layers.
        num_heads: Number of attention heads (and key/value heads).
        seed: Seed of the weight initialisation. The global torch RNG state is left untouched.
        max_position_embeddings: Longest sequence the model is configured for.

    Returns:
        The model (in eval mode, float32, on CPU) with tied input/output embeddings.

    Raises:
        ValueError: If ``hidden_size`` is not divisible by ``num_heads``.
    """
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads})")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        use_sliding_window=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    config._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    generation_config = model.generation_config
    generation_config.pad_token_id = tokenizer.pad_token_id
    generation_config.bos_token_id = tokenizer.bos_token_id
    generation_config.eos_token_id = tokenizer.eos_token_id
    model.eval()
    return model
