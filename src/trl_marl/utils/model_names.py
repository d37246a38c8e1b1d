"""Model names that stand for something else than a Hub id or a folder (a plug-in point for upper layers).

A layer above the team (e.g. `trl_marl.toy`, whose names such as `"toy"` build a tiny model on first use, and whose
`"smollm2-135m-instruct"` dequantizes a real instruct model once, see docs/real_model.md) registers a resolver here;
`AgentTeam.build`, `load_tokenizer`, the legacy value-head model and the scripts call [`resolve_model_name`] on every
name they load, so the team never imports the layer that defines the names. A team keeps the registered name (not
the folder) as its base model's `name_or_path`, so saved teams and model cards name it.

Example:

```python
from trl_marl.utils.model_names import register_model_name_resolver, resolve_model_name

register_model_name_resolver(lambda name: "/models/local-copy" if name == "my-alias" else None)
assert resolve_model_name("my-alias") == "/models/local-copy"
```
"""

from __future__ import annotations

from collections.abc import Callable

ModelNameResolver = Callable[[str], "str | None"]
_RESOLVERS: list[ModelNameResolver] = []


def register_model_name_resolver(resolver: ModelNameResolver) -> ModelNameResolver:
    """Add a resolver: a function that returns the folder (or Hub id) a name stands for, or None if it is not its."""
    if resolver not in _RESOLVERS:
        _RESOLVERS.append(resolver)
    return resolver


def resolve_model_name(name: str) -> str:
    """The folder or Hub id a model name stands for: the first registered resolver that knows it, else the name."""
    for resolver in _RESOLVERS:
        resolved = resolver(name)
        if resolved is not None:
            return resolved
    return name
