"""`keep_freed_memory`: large blocks freed by torch are reused, not page-faulted in again (counted, not timed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from trl_marl.utils.malloc import keep_freed_memory

# grows an 8-layer KV cache of 64 rows by one token per step as the dynamic cache does, and prints the minor page
# faults of 5 steps; each concatenation allocates 64*3*1000*64*4 B = 49 MB, above glibc's 32 MB cap on its dynamic
# mmap threshold, so the default allocator maps (and the kernel zero-fills) fresh pages for every layer and step
PROGRAM = textwrap.dedent("""
    import resource, sys
    import torch
    from trl_marl.utils.malloc import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    torch.set_num_threads(1)
    cache = [torch.zeros(64, 3, 1000, 64) for _ in range(8)]
    for _ in range(3):  # warm: the first steps fault in the heap once either way
        cache = [torch.cat([k, torch.ones(64, 3, 1, 64)], dim=-2) for k in cache]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        cache = [torch.cat([k, torch.ones(64, 3, 1, 64)], dim=-2) for k in cache]
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_cache_blocks_are_reused_instead_of_faulted_in_again() -> None:
    default, kept = _faults("default"), _faults("keep")
    # default: every step faults in a fresh copy of the whole cache (5 steps x 8 blocks of 49 MB: ~96,000 4 kB
    # pages; measured 482,920); kept: the blocks freed by the step before are reused, and only the heap's growth is
    # faulted in (measured 48,564: half of one step's cache over the 5 steps)
    pages_per_step = 8 * 64 * 3 * 1000 * 64 * 4 // 4096
    assert default > 4 * pages_per_step, default
    assert kept < pages_per_step, (kept, default)


def test_a_non_positive_limit_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="`limit`"):
        keep_freed_memory(0)
