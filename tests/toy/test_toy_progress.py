"""A toy model that pretrains shows a progress bar under the label it is given, and a cached one shows nothing (issue
53, item 8: the demo's first minutes printed "[1/4] ..." and then nothing while three debate models pretrained)."""

from __future__ import annotations

import pytest

from trl_marl.toy import make_toy_model


def test_pretraining_shows_its_label_and_a_cached_model_shows_nothing(tmp_path, capsys: pytest.CaptureFixture[str]):
    settings = dict(task="target", hidden_size=16, num_layers=1, pretrain_steps=3, seed=0, targets=(10,))
    make_toy_model(tmp_path / "model", progress="  the label", **settings)
    shown = capsys.readouterr().err
    assert "the label" in shown and "3/3" in shown
    make_toy_model(tmp_path / "model", progress="  the label", **settings)  # cached: same arguments, no bar
    assert capsys.readouterr().err == ""
    make_toy_model(tmp_path / "quiet", **settings)  # the default: no bar
    assert "pretraining" not in capsys.readouterr().err
