"""Adapter registry. Modules are imported lazily, so a missing framework never breaks `compare list`.

To add an adapter: write `adapters/<name>.py` with a subclass of `adapters.base.Adapter` named `ADAPTER`, and
add one line to `_MODULES` below. Everything else (CLI, launch, records, report) picks it up.
"""

from __future__ import annotations

from importlib import import_module

from adapters.base import Adapter, Availability

# name -> module; order is the order of rows in a default comparison.
_MODULES: dict[str, str] = {
    "dp": "adapters.dp",
    "ddp": "adapters.ddp",
    "spawn": "adapters.spawn",
    "amp": "adapters.amp",
    "apex": "adapters.apex",
    "horovod": "adapters.horovod",
    "deepspeed": "adapters.deepspeed",
}
# Not a comparison row: the single-process fp32 run every adapter's parameters are checked against.
_HIDDEN: dict[str, str] = {"reference": "adapters.reference"}


# `compare comm` backends -> the adapter whose launcher and comm() object they use.
_COMM: dict[str, str] = {"torch": "ddp", "horovod": "horovod", "deepspeed": "deepspeed"}


def comm_backends() -> list[str]:
    return [backend for backend, adapter in _COMM.items() if adapter in _MODULES]


def comm_backend_adapter(backend: str) -> str:
    return _COMM[backend]


class UnknownAdapter(KeyError):
    def __init__(self, name: str):
        super().__init__(name)
        self.message = f"unknown adapter '{name}'; valid choices: {', '.join(names())}"

    def __str__(self) -> str:
        return self.message


def names() -> list[str]:
    return list(_MODULES)


def get(name: str) -> type[Adapter]:
    module = _MODULES.get(name) or _HIDDEN.get(name)
    if module is None:
        raise UnknownAdapter(name)
    return import_module(module).ADAPTER


def availability(name: str, device: str, world_size: int) -> Availability:
    """Availability that also covers an adapter module that fails to import."""
    try:
        cls = get(name)
    except UnknownAdapter:
        raise
    except Exception as exc:  # an adapter file must not take the registry down with it
        return Availability(False, f"adapter module failed to import: {type(exc).__name__}: {exc}")
    try:
        return cls.availability(device, world_size)
    except Exception as exc:
        return Availability(False, f"availability check raised {type(exc).__name__}: {exc}")
