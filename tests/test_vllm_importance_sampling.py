"""TRL's truncated importance-sampling correction of the vLLM engine / training model mismatch (Yao et al., 2025):
the ratio on hand-computed values for every mode, and the trainers weighting their loss by it."""

from __future__ import annotations

import math

import pytest
import torch

from trl_marl.core import VLLM_IMPORTANCE_SAMPLING_MODES, engine_importance_sampling_ratio

LN2, LN3 = math.log(2.0), math.log(3.0)
# row 0: d = [ln 2, ln 2, (pad)] -> token ratios [2, 2], sequence ratio 4
# row 1: d = [-ln 2, ln 3, 0]    -> token ratios [0.5, 3, 1], sequence ratio 1.5
OLD = torch.tensor([[LN2 - 1.0, LN2 - 2.0, 5.0], [-LN2 - 0.5, LN3 - 0.25, -0.75]])
SAMPLING = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.25, -0.75]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])


@pytest.mark.parametrize(("mode", "clip_min", "clip_max", "expected"), [
    ("token_truncate", None, 2.5, [[2.0, 2.0, 1.0], [0.5, 2.5, 1.0]]),
    ("token_truncate", 0.8, 2.5, [[2.0, 2.0, 1.0], [0.8, 2.5, 1.0]]),
    ("token_mask", None, 2.5, [[2.0, 2.0, 1.0], [0.5, 0.0, 1.0]]),
    ("token_mask", 0.8, None, [[2.0, 2.0, 1.0], [0.0, 3.0, 1.0]]),
    ("sequence_truncate", None, 3.0, [[3.0], [1.5]]),
    ("sequence_truncate", 2.0, 5.0, [[4.0], [2.0]]),
    ("sequence_mask", None, 3.0, [[0.0], [1.5]]),
    ("sequence_mask", 2.0, None, [[4.0], [0.0]]),
])
def test_ratio_on_hand_values(mode: str, clip_min: float | None, clip_max: float | None,
                              expected: list[list[float]]) -> None:
    ratio = engine_importance_sampling_ratio(OLD, SAMPLING, MASK, mode, clip_min, clip_max)
    torch.testing.assert_close(ratio, torch.tensor(expected), rtol=1e-6, atol=1e-6)


def test_nan_engine_logprob_counts_as_no_mismatch_and_ratio_has_no_gradient() -> None:
    old = OLD.clone().requires_grad_(True)
    sampling = SAMPLING.clone()
    sampling[1, 0] = float("nan")  # a token the engine could not score: d = 0 there, as in TRL
    ratio = engine_importance_sampling_ratio(old, sampling, MASK, "token_truncate", None, 10.0)
    torch.testing.assert_close(ratio, torch.tensor([[2.0, 2.0, 1.0], [1.0, 3.0, 1.0]]))
    assert not ratio.requires_grad
    seq = engine_importance_sampling_ratio(old, sampling, MASK, "sequence_truncate", None, 10.0)
    torch.testing.assert_close(seq, torch.tensor([[4.0], [3.0]]))


def test_unknown_mode_is_refused() -> None:
    assert "sequence_mask" in VLLM_IMPORTANCE_SAMPLING_MODES
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode"):
        engine_importance_sampling_ratio(OLD, SAMPLING, MASK, "sequence")
