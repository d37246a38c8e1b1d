"""The Python snippets of README.md and docs/environments.md run offline exactly as written.

Each ```python block is executed as it stands, in a fresh namespace, in an empty working directory (a block of a
page may use what an earlier block of the same page defined, as a reader running the page top to bottom would).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_runnable_quick_starts() -> None:
    blocks = python_blocks(ROOT / "README.md")
    assert len(blocks) == 3
    assert "MAGRPOTrainer(" in blocks[0] and "MultiAgentPPOTrainer(" in blocks[1]


@pytest.mark.parametrize("index", range(3))
@pytest.mark.slow
def test_readme_snippet_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__readme__"}
    exec(compile(python_blocks(ROOT / "README.md")[index], f"README.md[python block {index}]", "exec"), namespace)
    trainer = namespace.get("trainer")
    if index == 0:  # MAGRPO: the steps it asked for, a team reward logged at every logging step
        assert trainer.state.global_step == 30
        assert len([h for h in trainer.state.log_history if "reward" in h]) == 3
    elif index == 1:  # MAPoRL: 64 episodes of 16 rows = 4 PPO updates, then a per-turn evaluation
        assert trainer.state.global_step == 4
    else:  # the two drop-in imports are the package's own classes
        assert namespace["PPOTrainer"].__module__.startswith("trl_marl.legacy")


@pytest.mark.slow
def test_environment_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gguf")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for i, block in enumerate(python_blocks(ROOT / "docs" / "environments.md")):
        exec(compile(block, f"docs/environments.md[python block {i}]", "exec"), namespace)
    env = namespace["TitleAndSummaryEnv"]()
    from trl_marl.envs.base import Transcript

    first = env.agent_prompt({"text": "x"}, 1, Transcript())
    assert first[-1]["content"].startswith("Write a one-sentence summary")
    later = env.agent_prompt({"text": "x"}, 0, Transcript().extend(["A title", "A summary."]))
    assert [m["role"] for m in later] == ["user", "assistant", "user"]
    assert "A summary." in later[-1]["content"]
    reward = namespace["shared_words"]
    title, summary = [{"role": "assistant", "content": "Bees dance"}], [{"role": "assistant", "content": "bees fly."}]
    completions = [[title], [summary]]
    assert reward([], [], agent_completions=completions) == [0.5]
    assert namespace["trainer"].state.global_step == 1
