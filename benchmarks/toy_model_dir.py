"""Build a tiny causal LM + character-level tokenizer and save both to a local directory.

Used by the MAGRPO benchmarks so that both sides (trl_marl and the comlrl peer) load the *same*
weights from disk, with no Hub access. Prefers the project's own ``trl_marl.toy`` module when it can be
imported; otherwise falls back to a small local builder (a ``Qwen2ForCausalLM`` from config and a
``WordLevel`` character tokenizer wrapped in ``PreTrainedTokenizerFast``).

Usage: build the directory once with the main venv (trl_marl.toy is then used, from an installed package or
from this checkout's ``src/``, and the model is pretrained to output numbers), and give the same directory to
both benchmark sides::

    /work/venv/bin/python benchmarks/toy_model_dir.py /tmp/toy-qwen2 --hidden-size 64 --num-layers 2 --seed 0

Run with a venv that has no trl (e.g. the comlrl one) it falls back to the local builder (random init).
Load the tokenizer with ``PreTrainedTokenizerFast.from_pretrained``, not ``AutoTokenizer``: transformers 5.x
replaces the tokenizer of any ``qwen2`` directory by ``Qwen2Tokenizer``, which drops spaces.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

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


def _import_make_toy_model():
    """``trl_marl.toy.make_toy_model`` if importable (installed, or from this checkout's ``src/``), else None."""
    try:
        from trl_marl.toy import make_toy_model

        return make_toy_model
    except ImportError:
        pass
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    if os.path.isdir(os.path.join(src, "trl_marl")) and src not in sys.path:
        sys.path.insert(0, src)
        try:
            from trl_marl.toy import make_toy_model

            return make_toy_model
        except ImportError:  # e.g. the comlrl venv, which has no trl
            sys.path.remove(src)
            for name in [m for m in sys.modules if m == "trl_marl" or m.startswith("trl_marl.")]:
                del sys.modules[name]
    return None


def build_model_dir(
    path: str,
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    pretrain_steps: int = 300,
    allow_fallback: bool = True,
) -> dict:
    """Save a tiny model + tokenizer under ``path``; return a description (also written to ``toy_builder.json``).

    With ``trl_marl.toy`` the model is pretrained for ``pretrain_steps`` steps on the "target" task (T=10) so
    that it outputs valid numbers; the fallback builder leaves it randomly initialised (``pretrain_steps`` 0).
    """
    make_toy_model = _import_make_toy_model()
    if make_toy_model is not None:
        make_toy_model(
            path,
            task="target",
            hidden_size=hidden_size,
            num_layers=num_layers,
            seed=seed,
            pretrain_steps=pretrain_steps,
            targets=(10,),
        )
        builder = "trl_marl.toy.make_toy_model"
    elif allow_fallback:
        os.makedirs(path, exist_ok=True)
        tokenizer = build_fallback_tokenizer()
        model = build_fallback_model(tokenizer, hidden_size=hidden_size, num_layers=num_layers, seed=seed)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        builder, pretrain_steps = "fallback (benchmarks/toy_model_dir.py, random init)", 0
    else:
        raise ImportError("trl_marl.toy is not importable and --no-fallback was given")
    info = {
        "builder": builder,
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "seed": seed,
        "pretrain_steps": pretrain_steps,
    }
    with open(os.path.join(path, "toy_builder.json"), "w") as f:
        json.dump(info, f, indent=2)
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pretrain-steps", type=int, default=300, help="trl_marl.toy only")
    parser.add_argument("--no-fallback", action="store_true", help="fail unless trl_marl.toy is importable")
    args = parser.parse_args()
    info = build_model_dir(
        args.path, args.hidden_size, args.num_layers, args.seed, args.pretrain_steps, not args.no_fallback
    )
    print(json.dumps(info))


if __name__ == "__main__":
    main()
