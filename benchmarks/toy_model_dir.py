"""Build a tiny causal LM + character-level tokenizer and save both to a local directory.

Used by the MAGRPO benchmarks so that both sides (trl_marl and the comlrl peer) load the *same*
weights from disk, with no Hub access. Prefers the project's own ``trl_marl.toy`` module when it can be
imported; otherwise falls back to a small local builder (a ``Qwen2ForCausalLM`` from config and a
``WordLevel`` character tokenizer wrapped in ``PreTrainedTokenizerFast``).

Usage (either virtualenv works; only torch, transformers and tokenizers are needed)::

    python benchmarks/toy_model_dir.py /tmp/toy-qwen2 --hidden-size 64 --num-layers 2 --seed 0
"""

from __future__ import annotations

import argparse
import json
import os

CHARS = list("0123456789") + list("+-=?:TQA") + [" "]
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


def build_fallback_tokenizer():
    """Character-level tokenizer: every character of ``CHARS`` is one token; bos added by a template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # One piece per character (spaces included), joined back without separators when decoding.
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", vocab["<s>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
    )


def build_fallback_model(tokenizer, hidden_size: int = 64, num_layers: int = 2, seed: int = 0):
    """A randomly initialised ``Qwen2ForCausalLM`` with tied embeddings, sized for the tokenizer."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    heads = max(1, hidden_size // 16)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model


def build_model_dir(path: str, hidden_size: int = 64, num_layers: int = 2, seed: int = 0) -> dict:
    """Save a tiny model + tokenizer under ``path``; return a description (also written to ``toy_builder.json``)."""
    os.makedirs(path, exist_ok=True)
    builder = "fallback"
    try:
        from trl_marl.toy import make_toy_model  # the project's own builder, once it exists

        make_toy_model(path, hidden_size=hidden_size, num_layers=num_layers, seed=seed)
        builder = "trl_marl.toy.make_toy_model"
    except ImportError:
        tokenizer = build_fallback_tokenizer()
        model = build_fallback_model(tokenizer, hidden_size=hidden_size, num_layers=num_layers, seed=seed)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    info = {"builder": builder, "hidden_size": hidden_size, "num_layers": num_layers, "seed": seed}
    with open(os.path.join(path, "toy_builder.json"), "w") as f:
        json.dump(info, f, indent=2)
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(build_model_dir(args.path, args.hidden_size, args.num_layers, args.seed)))


if __name__ == "__main__":
    main()
