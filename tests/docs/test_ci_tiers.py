"""`.ci/run` runs the README's test command verbatim (the quick tier) and the slow tier after it, so that marking a
test `slow` never takes it out of CI (issue 53, item 11)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readme_command_and_the_slow_tier() -> None:
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"Run the tests:\n\n```bash\n(.*?)\n```", readme, re.S)
    assert first is not None
    command = first.group(1).split(" && ")[-1]
    assert command.startswith("python -m pytest tests ") and '-m "not slow"' in command
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if not line.startswith("#")]
    assert command in ci
    slow = command.replace('-m "not slow"', "-m slow")
    assert slow in ci and ci.index(slow) > ci.index(command)
    assert "-m slow" in readme.split("## Development", 1)[1]
    assert 'slow: ' in (ROOT / "pyproject.toml").read_text()
