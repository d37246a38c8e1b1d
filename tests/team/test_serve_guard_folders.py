"""Issue 54, item 11: `trl-marl vllm-serve --adapter-dir DIR` (or `TRL_MARL_VLLM_SERVE_DIR`) changed an existing
DIR from mode 1777 to 700 even when vLLM never started: pointed at a shared temporary folder as root, it locked every
other user out. Now no existing folder changes mode; a shared one gets a private folder of the server's own inside.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from trl_marl import cli
from trl_marl.team.generation.serve_guard import read_connection, write_connection


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def folder(path: Path, permissions: int) -> Path:
    path.mkdir()
    os.chmod(path, permissions)
    return path


def test_a_shared_adapter_folder_keeps_its_mode_and_gets_a_private_folder_inside(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRL_MARL_VLLM_SERVE_DIR", str(tmp_path / "state"))
    for name, permissions in (("sticky", 0o1777), ("world", 0o777), ("group", 0o775)):
        shared = folder(tmp_path / name, permissions)
        write_connection(8200, "key", shared)
        assert mode(shared) == permissions, name
        adapters = Path(read_connection(8200)["adapter_dir"])
        assert adapters.parent == shared.resolve() and adapters.name.startswith("trl-marl-adapters-")
        assert mode(adapters) == 0o700 and adapters.stat().st_uid == os.geteuid()


def test_a_folder_only_the_user_writes_is_used_as_it_is_and_a_missing_one_is_created_private(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRL_MARL_VLLM_SERVE_DIR", str(tmp_path / "state"))
    for name, permissions in (("readable", 0o755), ("private", 0o700), ("mine", 0o500)):
        own = folder(tmp_path / name, permissions)
        write_connection(8201, "key", own)
        assert mode(own) == permissions and read_connection(8201)["adapter_dir"] == str(own.resolve()), name
    write_connection(8201, "key", tmp_path / "new" / "adapters")
    assert mode(tmp_path / "new" / "adapters") == 0o700
    assert read_connection(8201)["adapter_dir"] == str((tmp_path / "new" / "adapters").resolve())
    assert mode(tmp_path / "state") == 0o700  # the missing state folder, created private


def test_a_shared_state_folder_keeps_its_mode_and_a_planted_link_is_replaced_not_written_through(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = folder(tmp_path / "state", 0o1777)
    monkeypatch.setenv("TRL_MARL_VLLM_SERVE_DIR", str(state))
    target = tmp_path / "target.txt"
    target.write_text("keep me")
    (state / "port-8202.json").symlink_to(target)
    path = write_connection(8202, "secret", tmp_path / "adapters")
    assert mode(state) == 0o1777 and target.read_text() == "keep me"
    assert not path.is_symlink() and mode(path) == 0o600
    assert json.loads(path.read_text())["api_key"] == "secret"
    assert sorted(p.name for p in state.iterdir()) == ["port-8202.json"]  # no temporary file left


def test_vllm_serve_on_a_shared_folder_changes_no_mode_even_when_vllm_never_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = folder(tmp_path / "shared-state", 0o1777)
    shared = folder(tmp_path / "shared-adapters", 0o1777)
    monkeypatch.setenv("TRL_MARL_VLLM_SERVE_DIR", str(state))
    monkeypatch.delenv("VLLM_API_KEY", raising=False)

    def execve(path: str, argv: list[str], env: dict[str, str]) -> None:
        raise OSError("vLLM is not installed")  # the server never starts

    monkeypatch.setattr(os, "execve", execve)
    with pytest.raises(OSError, match="not installed"):
        cli.main(["vllm-serve", "--model", "base", "--port", "8203", "--adapter-dir", str(shared)])
    assert (mode(state), mode(shared)) == (0o1777, 0o1777)
    adapters = Path(read_connection(8203)["adapter_dir"])
    assert adapters.parent == shared.resolve() and mode(adapters) == 0o700
