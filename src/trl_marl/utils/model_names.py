"""Model names that stand for something else than a Hub id or a folder (a plug-in point for upper layers).

A layer above the team (e.g. `trl_marl.offline_models`, whose names such as `"toy"` build a tiny model on first use,
and whose `"smollm2-135m-instruct"` dequantizes a real instruct model once, see docs/real_model.md) registers a
resolver here; `AgentTeam.build`, `load_tokenizer`, the legacy value-head model and the scripts call
[`resolve_model_name`] on every name they load, so the team never imports the layer that defines the names. A team
keeps the registered name (not the folder) as its base model's `name_or_path`, so saved teams and model cards name
it.

Example:

```python
from trl_marl.utils.model_names import register_model_name_resolver, resolve_model_name

register_model_name_resolver(lambda name: "/models/local-copy" if name == "my-alias" else None)
assert resolve_model_name("my-alias") == "/models/local-copy"
```
"""

from __future__ import annotations

import difflib
import functools
import os
import socket
from collections.abc import Callable, Sequence
from urllib.parse import urlparse

ModelNameResolver = Callable[[str], "str | None"]
_RESOLVERS: list[ModelNameResolver] = []
_NAMES: list[str] = []  # the names the resolvers stand for, as error messages list them


class UnknownModelNameError(OSError):
    """A model name that is no local folder, no registered name and not in the Hugging Face cache, while the Hub
    cannot be reached (an `OSError`, as transformers' own "not found" errors)."""


def register_model_name_resolver(resolver: ModelNameResolver, names: Sequence[str] = ()) -> ModelNameResolver:
    """Add a resolver: a function that returns the folder (or Hub id) a name stands for, or None if it is not its.

    `names` lists the names it knows (or patterns such as `"toy:<task>"`), for the messages of
    [`check_model_name`]."""
    if resolver not in _RESOLVERS:
        _RESOLVERS.append(resolver)
    _NAMES.extend(n for n in names if n not in _NAMES)
    return resolver


def registered_model_names() -> list[str]:
    """The names registered resolvers listed (after the lazy resolvers have loaded theirs)."""
    resolve_model_name("")  # a lazy resolver (`trl_marl`'s) registers the offline names on its first call
    return list(_NAMES)


def resolve_model_name(name: str) -> str:
    """The folder or Hub id a model name stands for: the first registered resolver that knows it, else the name."""
    for resolver in _RESOLVERS:
        resolved = resolver(name)
        if resolved is not None:
            return resolved
    return name


_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_offline() -> bool:
    """Whether the user switched the Hugging Face Hub off (`HF_HUB_OFFLINE` or `TRANSFORMERS_OFFLINE`)."""
    return any(os.environ.get(var, "").strip().upper() in _TRUE for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


@functools.lru_cache(maxsize=4)
def hub_reachable(endpoint: str | None = None, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub's host opens within `timeout` seconds (asked once per process and
    endpoint; `HF_ENDPOINT`, else huggingface.co)."""
    url = urlparse(endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def _behind_proxy() -> bool:
    """Whether requests go through a proxy (then a direct connection says nothing about the Hub)."""
    return any(os.environ.get(var) for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"))


def hub_unavailable_reason() -> str | None:
    """Why the Hugging Face Hub cannot be used now (`"switched off (...)"`, `"unreachable from this machine (...)"`),
    or None when it may be: the one test that [`check_model_name`] and the scripts' dataset loading share, so that
    neither waits for the Hub client's retries."""
    if hub_offline():
        return "switched off (HF_HUB_OFFLINE=1 or TRANSFORMERS_OFFLINE=1)"
    if not _behind_proxy() and not hub_reachable():
        return f"unreachable from this machine ({os.environ.get('HF_ENDPOINT') or 'https://huggingface.co'})"
    return None


def _in_hub_cache(name: str) -> bool:
    """Whether the Hugging Face cache holds a `config.json` of the repository `name` (loadable offline)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # an invalid repository id: not in the cache
        return False


def check_model_name(name: str, field: str = "`model_name_or_path`") -> None:
    """Refuse, without any Hub request, a model name that cannot load: not a registered name, not a local folder, not
    in the Hugging Face cache, while the Hub is offline (`HF_HUB_OFFLINE=1`) or unreachable. The error lists the
    registered offline names and the closest of them.

    Without this check transformers retries the Hub for tens of seconds, then raises a generic `OSError` that names
    none of the offline models. A name that may be on a reachable Hub passes (the Hub answers it).

    Raises:
        UnknownModelNameError: If the name cannot load.
    """
    if not isinstance(name, str) or not name or resolve_model_name(name) != name:
        return
    path = os.path.expanduser(name)
    if os.path.exists(path) or name.startswith((".", "~", "/", os.sep)) or name.count("/") > 1:
        return  # a folder (`utils.inputs.check_model_path` refuses a missing one)
    if _in_hub_cache(name):
        return
    why = hub_unavailable_reason()
    if why is None:
        return
    names = registered_model_names()
    close = [n for n in names if n.startswith(name) or name.startswith(n)] or difflib.get_close_matches(
        name, names, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(repr(n) for n in names) or "none registered"
    raise UnknownModelNameError(
        f"{field} {name!r} is not a local folder, not an offline model name and not in the Hugging Face cache, and "
        f"the Hub is {why}, so it cannot be downloaded.{hint} The offline names: {listed} (see docs/real_model.md). "
        "Otherwise pass a folder that holds config.json, or download the model once while the Hub is reachable."
    )
