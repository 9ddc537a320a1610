"""Name -> class registries with lazy imports, shared by adapters/ and workloads/.

Runs in: the parent and every rank. Modules are imported only when their entry is asked for, so a framework that
is not installed never breaks `compare list` ("This importlib loading ... allows runners to avoid installing the
dependencies of all the supported frameworks", AlgoPerf).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any


class UnknownName(KeyError):
    """A name that is not in a registry; its message names the valid choices."""

    def __init__(self, kind: str, name: str, valid: list[str]):
        super().__init__(name)
        self.message = f"unknown {kind} '{name}'; valid choices: {', '.join(valid)}"

    def __str__(self) -> str:
        return self.message


class Registry:
    """Entries `name -> (module, attribute, preset)`; `get(name)` imports the module and returns the attribute.

    `hidden` entries can be looked up but are not listed (the equivalence reference is not a comparison row).
    """

    def __init__(self, kind: str, entries: dict[str, str | tuple[str, dict[str, Any]]], attribute: str,
                 hidden: dict[str, str] | None = None):
        self.kind, self.attribute = kind, attribute
        self._entries = {name: (e, {}) if isinstance(e, str) else e for name, e in entries.items()}
        self._hidden = {name: (module, {}) for name, module in (hidden or {}).items()}

    def names(self) -> list[str]:
        """Listed names, in registry order (the order of rows in a default comparison)."""
        return list(self._entries)

    def entry(self, name: str) -> tuple[Any, dict[str, Any]]:
        """(the registered attribute, its preset options) for `name`; UnknownName if it is not registered."""
        found = self._entries.get(name) or self._hidden.get(name)
        if found is None:
            raise UnknownName(self.kind, name, self.names())
        module, preset = found
        return getattr(import_module(module), self.attribute), dict(preset)
