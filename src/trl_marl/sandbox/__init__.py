"""The code-execution sandbox of trl-marl.

The trainer-side API (limits, test specifications, `run_programs`, the `UnitTestReward`) lives in
`trl_marl.rewards.execution`; this package holds what runs inside each sandbox: [`harness`], a standalone module that
the caller sends to a fresh `python -I` interpreter, and its plain-data codec. See `docs/sandbox.md` for the threat
model and the guarantees of each isolation level.
"""

from pathlib import Path

HARNESS_PATH = Path(__file__).with_name("harness.py")
"""The harness's source file (sent to each sandbox interpreter)."""

__all__ = ["HARNESS_PATH"]
