"""What `trl-marl vllm-serve` adds to vLLM's OpenAI server, and how a trainer finds the server's key and folder.

vLLM's server, as it starts by default, lets anyone who reaches its port load any folder of the machine as a LoRA
adapter (`/v1/load_lora_adapter` with an absolute path or `../..`, its errors telling files from folders), answers
without a key, and publishes `/docs`, `/openapi.json` and `/metrics`. `trl-marl vllm-serve` starts it with:

- an API key: `VLLM_API_KEY` from the environment when set, else a fresh random one. It goes to the server in its
  environment (never on its command line, which every local user can read), and [`ServerGuard`] asks for it
  (`Authorization: Bearer <key>`) on every path but `/health`, where vLLM's own check covers only `/v1` and a few
  other prefixes;
- an adapter folder (`--adapter-dir`, default `<state folder>/port-<port>/adapters`, created private to the user
  when missing; an existing folder keeps its mode, and when other users can write it, e.g. `/tmp`, the trainer's
  adapters go to a private folder of their own inside it, named in the connection file): runtime adapter loading
  takes only folders inside it. A relative `lora_path` is read inside it; an absolute path
  elsewhere, a path with `..`, a symbolic link that leads out, or anything else is refused with ONE message, the
  same whether the path is a file, a folder or missing. The checked, resolved path is what vLLM then loads;
- `/docs`, `/redoc`, `/openapi.json` and `/metrics` answering 404 unless `--open-docs` / `--open-metrics`.

How the trainer learns the key and the folder: `vllm-serve` writes them to a connection file readable by the user
only, `<state folder>/port-<port>.json` (the state folder is `$TRL_MARL_VLLM_SERVE_DIR`, else
`~/.cache/trl-marl/vllm-serve`), and a trainer on the same machine with `vllm_mode="server"` reads the file of the
port it talks to ([`read_connection`]), so nothing needs setting. From another machine (or to override the file), set
`VLLM_API_KEY` to the key the server printed the file's path for, and `TRL_MARL_VLLM_ADAPTER_DIR` to the adapter
folder as both machines see it (a shared file system).

This module is imported by the server process (vLLM's `--middleware`): it needs the standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = [
    "ADAPTER_DIR_ENV",
    "ServerGuard",
    "adapter_path_error",
    "connection_path",
    "new_api_key",
    "read_connection",
    "state_dir",
    "write_connection",
]

ADAPTER_DIR_ENV = "TRL_MARL_VLLM_ADAPTER_DIR"
OPEN_DOCS_ENV = "TRL_MARL_VLLM_OPEN_DOCS"
OPEN_METRICS_ENV = "TRL_MARL_VLLM_OPEN_METRICS"
DOCS_PATHS = ("/docs", "/redoc", "/openapi.json")
OPEN_PATHS = ("/health",)
MAX_LOAD_BODY = 64 << 10  # bytes of a `/v1/load_lora_adapter` request
REFUSED_ADAPTER = (
    "`lora_path` must name an adapter folder inside the adapter folder this server was started with "
    "(`trl-marl vllm-serve --adapter-dir`); this one is not allowed."
)


def state_dir() -> Path:
    """Where `vllm-serve` writes its connection files: `$TRL_MARL_VLLM_SERVE_DIR`, else
    `~/.cache/trl-marl/vllm-serve` (`$XDG_CACHE_HOME` for `~/.cache` when set)."""
    configured = os.environ.get("TRL_MARL_VLLM_SERVE_DIR")
    if configured:
        return Path(configured).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "trl-marl" / "vllm-serve"


def connection_path(port: int) -> Path:
    """The connection file of the server on `port` (see the module docstring)."""
    return state_dir() / f"port-{int(port)}.json"


def new_api_key() -> str:
    """A fresh random API key (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def _private_dir(path: Path) -> Path:
    """`path` as a folder: created private to the user (mode 0700) when it is missing. An existing folder is used as
    it is, its mode never changed: a folder the user passed may be shared (`/tmp`, mode 1777), and making it private
    would lock every other user out of it, even when the server never starts."""
    try:
        path.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        if not path.is_dir():
            raise NotADirectoryError(f"trl-marl vllm-serve: {path} exists and is not a folder.") from None
        return path
    os.chmod(path, 0o700)  # the folder just created, whatever the umask: nobody else's
    return path


def _shared(path: Path) -> bool:
    """Whether a folder is writable by other users than this one: group or world write permission, or another
    owner."""
    info = path.stat()
    return bool(info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) or info.st_uid != os.geteuid()


def _adapter_folder(adapter_dir: str | os.PathLike) -> Path:
    """The adapter folder of a server: `adapter_dir`, created private when missing; when it exists and other users
    can write it (a shared temporary folder), a private folder of its own inside it (`trl-marl-adapters-*`, mode
    0700), so nobody else can write or replace an adapter there, and the folder the user passed keeps its mode."""
    root = _private_dir(Path(adapter_dir).expanduser().resolve())
    if _shared(root):
        return Path(tempfile.mkdtemp(prefix="trl-marl-adapters-", dir=root))
    return root


def write_connection(port: int, api_key: str, adapter_dir: str | os.PathLike) -> Path:
    """Create the adapter folder (private; see [`_adapter_folder`]) and write the connection file of the server on
    `port`, readable by the user only; returns the file's path.

    No existing folder changes mode: a missing state folder is created private, an existing one is used as it is,
    and the file is written to a new private file beside it and then renamed over `port-<port>.json`, so a file or
    link another user placed there is replaced, never written through.

    Raises:
        PermissionError: If the connection file cannot be replaced (it belongs to another user in a shared folder);
            the message names the fix (`TRL_MARL_VLLM_SERVE_DIR`).
    """
    adapters = _adapter_folder(adapter_dir)
    path = connection_path(port)
    _private_dir(path.parent)
    descriptor, temporary = tempfile.mkstemp(prefix=f".port-{int(port)}-", suffix=".json", dir=path.parent)
    try:
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump({"port": int(port), "api_key": api_key, "adapter_dir": str(adapters)}, handle)
        os.replace(temporary, path)
    except PermissionError as error:
        raise PermissionError(
            f"trl-marl vllm-serve: cannot write the connection file {path} ({error.strerror}): it belongs to another "
            "user in a shared folder. Set TRL_MARL_VLLM_SERVE_DIR to a folder of your own (created private when "
            "missing)."
        ) from None
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return path


def read_connection(port: int) -> dict[str, Any] | None:
    """The connection file of the server on `port` (`api_key`, `adapter_dir`), or None when there is none or it
    cannot be read."""
    try:
        with open(connection_path(port)) as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def adapter_path_error(lora_path: Any, root: str) -> tuple[str | None, str | None]:
    """`(resolved path, None)` for a `lora_path` inside `root`, else `(None, REFUSED_ADAPTER)`: the same message for
    every refused path, so that a client learns nothing about the machine's files.

    Args:
        lora_path: The path a client asked to load (relative paths are read inside `root`).
        root: The adapter folder, resolved.
    """
    if not isinstance(lora_path, str) or not lora_path or "\x00" in lora_path:
        return None, REFUSED_ADAPTER
    if ".." in Path(lora_path).parts:
        return None, REFUSED_ADAPTER
    full = lora_path if os.path.isabs(lora_path) else os.path.join(root, lora_path)
    resolved = os.path.realpath(full)
    if resolved == root or os.path.commonpath([resolved, root]) != root:
        return None, REFUSED_ADAPTER
    return resolved, None


Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def _reply(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ServerGuard:
    """A plain ASGI middleware (vLLM's `--middleware`) that closes what `trl-marl vllm-serve` closes (see the
    module docstring). Configured from the server's environment: `VLLM_API_KEY`, `TRL_MARL_VLLM_ADAPTER_DIR`,
    `TRL_MARL_VLLM_OPEN_DOCS`, `TRL_MARL_VLLM_OPEN_METRICS`.

    Args:
        app: The application it guards.
        environ: The environment to read (default `os.environ`).
    """

    def __init__(self, app: Any, environ: dict[str, str] | None = None) -> None:
        environ = dict(os.environ if environ is None else environ)
        self.app = app
        key = environ.get("VLLM_API_KEY") or ""
        self._key_hash = hashlib.sha256(key.encode()).digest() if key else None
        root = environ.get(ADAPTER_DIR_ENV)
        self.root = os.path.realpath(root) if root else None
        self.open_docs = environ.get(OPEN_DOCS_ENV) == "1"
        self.open_metrics = environ.get(OPEN_METRICS_ENV) == "1"

    def _authorized(self, scope: Scope) -> bool:
        if self._key_hash is None:
            return True
        for name, value in scope.get("headers") or []:
            if name.lower() == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    return hmac.compare_digest(hashlib.sha256(token.strip().encode()).digest(), self._key_hash)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "").removeprefix(scope.get("root_path", "") or "")
        path = "/" + path.lstrip("/")
        closed = (not self.open_docs and (path in DOCS_PATHS or path.startswith("/docs/"))) or (
            not self.open_metrics and (path == "/metrics" or path.startswith("/metrics/"))
        )
        if scope["type"] == "websocket":
            if closed or (path not in OPEN_PATHS and not self._authorized(scope)):
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        if closed:
            await _reply(send, 404, {"error": "Not Found"})
            return
        if scope.get("method") != "OPTIONS" and path not in OPEN_PATHS and not self._authorized(scope):
            await _reply(send, 401, {"error": "Unauthorized: send the server's API key as `Authorization: Bearer`."})
            return
        if path == "/v1/load_lora_adapter" and scope.get("method") == "POST":
            await self._load_adapter(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _load_adapter(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check a load request's `lora_path` and hand vLLM the resolved path (the request refused otherwise)."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > MAX_LOAD_BODY:
                await _reply(send, 413, {"error": f"A load request takes at most {MAX_LOAD_BODY} bytes."})
                return
            if not message.get("more_body", False):
                break
        try:
            request = json.loads(b"".join(chunks))
        except ValueError:
            await _reply(send, 400, {"error": "The body must be a JSON object."})
            return
        if not isinstance(request, dict):
            await _reply(send, 400, {"error": "The body must be a JSON object."})
            return
        if self.root is None:
            await _reply(send, 403, {"error": REFUSED_ADAPTER})
            return
        resolved, error = adapter_path_error(request.get("lora_path"), self.root)
        if error is not None:
            await _reply(send, 403, {"error": error})
            return
        body = json.dumps({**request, "lora_path": resolved}).encode()
        headers = [(k, v) for k, v in scope.get("headers") or [] if k.lower() != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
