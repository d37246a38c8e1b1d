"""A call's own `eos_token_id` (e.g. `generation_kwargs={"eos_token_id": [eos, fence]}`) ends completions: decoding
stops there and the completion is cut after it, so the padding of a finished row is never a completion token."""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from trl_marl import AgentTeam


def test_a_call_eos_token_cuts_the_completion(target_model_dir):
    team = AgentTeam.build(target_model_dir, 2, mode="models")
    tok = team.tokenizers[0]
    stops = [i for i in range(len(tok)) if i % 3 == 0 and i != tok.pad_token_id]
    torch.manual_seed(0)
    out = team.generate([["T:10:"] * 8, ["T:10:"] * 8],
                        GenerationConfig(max_new_tokens=8, do_sample=True, pad_token_id=tok.pad_token_id,
                                         eos_token_id=stops))
    rows = [row for _, agent_rows in out for row in agent_rows]
    ends = set(stops) | team.stop_token_ids(0)  # the model's own EOS still ends a completion
    # each completion ends at its first stop token (or at the length limit): nothing of it comes after a stop
    for row in rows:
        assert all(t not in ends for t in row[:-1]), row
        assert row[-1] in ends or len(row) == 8, row
    assert len({len(row) for row in rows}) > 1  # rows ended at different steps: the early ones were padded
