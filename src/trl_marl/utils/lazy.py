"""Names of a package imported on first use (PEP 562), for packages whose modules import torch or `datasets` while
some callers need only a light module of theirs (`trl_marl.data`, `trl_marl.toy`).

Example, in a package's `__init__.py`:

```python
from trl_marl.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {"load_tldr": ".writing"}, submodules=("files",))
```
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(package: str, public: Mapping[str, str], submodules: Sequence[str] = ()
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`: a name of `public` is read from the module it maps to (relative
    to `package`), imported on first access and then kept in the package; a name of `submodules` is that submodule."""

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f".{name}", package)
        if name not in public:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(public[name], package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *public, *submodules})

    return __getattr__, __dir__
