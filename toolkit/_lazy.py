"""One lazy-attribute hook shared by the subpackages that import heavy libraries late."""

from __future__ import annotations

import importlib


def lazy_getattr(package: str, table: dict[str, str], namespace: dict):
    """Return a module ``__getattr__`` that imports ``table[name]`` on first use,
    caches the attribute in ``namespace`` and raises AttributeError otherwise."""

    def __getattr__(name: str):
        if name in table:
            value = getattr(importlib.import_module(table[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
