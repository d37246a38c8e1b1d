"""What a sandbox user leaves on the host when a run had no mount namespace (the `"process"` level as root).

Without a mount namespace the program's `/tmp`, `/var/tmp` and `/dev/shm` are the host's, and the Python guards
that refuse writes outside the working directory can be bypassed (`os.mkfifo` is not audited; `_posixsubprocess`
runs any binary). The program runs under a user id of its own (unique to the run while it runs, and every process
of that user is killed before this cleanup), so what it created is recognisable by its owner.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat

__all__ = ["SHARED_TEMP_DIRS", "remove_user_files", "remove_user_ipc"]

SHARED_TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue")
"""The world-writable directories searched after a run without a mount namespace."""

_MAX_DEPTH = 4  # world-writable directories inside those (e.g. /tmp/.X11-unix) are searched this deep
_IPC_RMID = 0


def remove_user_files(uid: int, roots: tuple[str, ...] = SHARED_TEMP_DIRS) -> list[str]:
    """Remove every entry owned by `uid` in `roots`, and in world-writable directories below them (depth 4).

    Never follows a symbolic link: entries are examined with `lstat`, directories of `uid` are removed with
    `shutil.rmtree` (file-descriptor based on Linux, safe against symlinks planted inside), and only directories
    that are themselves world-writable and not `uid`'s are searched further.

    Args:
        uid (`int`): The sandbox user (never 0).
        roots (`tuple[str, ...]`): The directories to search.

    Returns:
        `list[str]`: The paths removed.
    """
    if uid == 0:
        raise ValueError("remove_user_files refuses to remove root's files")
    removed: list[str] = []
    seen: set[tuple[int, int]] = set()

    def visit(directory: str, depth: int) -> None:
        try:
            info = os.lstat(directory)
        except OSError:
            return
        if not stat.S_ISDIR(info.st_mode) or (info.st_dev, info.st_ino) in seen:
            return
        seen.add((info.st_dev, info.st_ino))
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        for entry in entries:
            try:
                entry_info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            is_dir = stat.S_ISDIR(entry_info.st_mode)
            if entry_info.st_uid == uid:
                try:
                    if is_dir:
                        shutil.rmtree(entry.path)
                    else:
                        os.unlink(entry.path)
                    removed.append(entry.path)
                except OSError:
                    pass
            elif is_dir and entry_info.st_mode & stat.S_IWOTH and depth < _MAX_DEPTH:
                visit(entry.path, depth + 1)

    for root in roots:
        # a root that is a symbolic link (/var/lock -> /run/lock) is ours, not the program's: resolve it
        visit(os.path.realpath(root), 0)
    return removed


def remove_user_ipc(uid: int, proc: str = "/proc/sysvipc") -> int:
    """Remove the System V shared memory segments, message queues and semaphore sets that `uid` created or owns
    (listed in `/proc/sysvipc`); how many were removed. Without an IPC namespace they outlive the run."""
    if uid == 0:
        raise ValueError("remove_user_ipc refuses to remove root's objects")
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return 0
    removers = {
        "shm": lambda ident: libc.shmctl(ident, _IPC_RMID, None),
        "msg": lambda ident: libc.msgctl(ident, _IPC_RMID, None),
        "sem": lambda ident: libc.semctl(ident, 0, _IPC_RMID),
    }
    count = 0
    for kind, remove in removers.items():
        try:
            with open(os.path.join(proc, kind)) as f:
                header, *rows = [line.split() for line in f]
        except (OSError, ValueError):
            continue
        try:
            ident_col = header.index({"shm": "shmid", "msg": "msqid", "sem": "semid"}[kind])
            owner_cols = (header.index("uid"), header.index("cuid"))
        except ValueError:
            continue
        for row in rows:
            try:
                if any(int(row[c]) == uid for c in owner_cols) and remove(int(row[ident_col])) == 0:
                    count += 1
            except (IndexError, ValueError):
                continue
    return count
