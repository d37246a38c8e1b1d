"""The registry of generation backends: a name (a value of a trainer config's `generation_backend`) maps to the
factory that builds the backend (`build.build_generation_backend` calls it). The built-in names are registered by
`build`; a user's backend by [`register_generation_backend`]. No backend module is imported here, so the settings'
check of a name (`settings`) and the backends' modules never import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BackendFactory = Callable[[Any, Any], Any]
"""What builds a backend: `factory(settings, team)` with the trainer's `GenerationSettings` and the `AgentTeam` it
samples for, returning a `GenerationBackend` (typed loosely: this module imports neither, so that the settings can
import it)."""

_FACTORIES: dict[str, BackendFactory] = {}


def register_generation_backend(name: str, factory: BackendFactory) -> BackendFactory:
    """Make `name` a value of `generation_backend` (in both trainers' configs): `factory(settings, team)` builds the
    backend. Returns `factory`.

    Raises:
        ValueError: If `name` is empty or another factory already has it.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"A generation backend's name must be a non-empty string, got {name!r}.")
    if _FACTORIES.get(name, factory) is not factory:
        raise ValueError(f"The generation backend {name!r} is registered already; choose another name.")
    _FACTORIES[name] = factory
    return factory


def generation_backend_names() -> tuple[str, ...]:
    """Every registered name, the built-in ones first."""
    return tuple(_FACTORIES)


def backend_factory(name: str) -> BackendFactory:
    """The factory registered under `name` (a `KeyError` for an unknown name: the settings refuse one first)."""
    return _FACTORIES[name]
