"""The tool tests' model: a tiny model with the toy ChatML tokenizer, whose template can write tool calls."""

from __future__ import annotations

import pytest

from trl_marl.toy import build_toy_chat_tokenizer, build_toy_model


@pytest.fixture(scope="module")
def chat_model_dir(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("toy_chat")
    tokenizer = build_toy_chat_tokenizer()
    build_toy_model(tokenizer, hidden_size=32, num_layers=1, max_position_embeddings=1024).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
