"""Adapter registry. Modules are imported lazily, so a missing framework never breaks `compare list`.

To add an adapter: write `adapters/<name>.py` with a subclass of `adapters.base.Adapter` named `ADAPTER`, and
add one line to `_MODULES` below. Everything else (CLI, launch, records, report) picks it up.
"""

from __future__ import annotations

from adapters.base import Adapter, Availability
from harness.shared.registry import Registry, UnknownName

# name -> module; order is the order of rows in a default comparison.
_MODULES: dict[str, str] = {
    "dp": "adapters.dp",
    "ddp": "adapters.ddp",
    "spawn": "adapters.spawn",
    "amp": "adapters.amp",
    "apex": "adapters.apex",
    "horovod": "adapters.horovod",
    "deepspeed": "adapters.deepspeed",
    "fsdp": "adapters.fsdp",
}
# Not a comparison row: the single-process fp32 run every adapter's parameters are checked against.
# Installed packages add adapters through this entry-point group (an Adapter subclass per entry).
GROUP = "compare.adapters"
_REGISTRY = Registry("adapter", _MODULES, "ADAPTER", hidden={"reference": "adapters.reference"}, group=GROUP)

# `compare comm` backends -> the adapter whose launcher and comm() object they use.
_COMM: dict[str, str] = {"torch": "ddp", "horovod": "horovod", "deepspeed": "deepspeed"}

__all__ = ["Adapter", "Availability", "UnknownName", "names", "get", "availability", "multinode", "comm_backends",
           "comm_backend_adapter", "legend", "declared"]


def names() -> list[str]:
    """Every comparison row's adapter name, in the order of a default comparison."""
    return _REGISTRY.names()


def source(name: str) -> str:
    """Where the adapter `name` comes from: built-in, or an installed package's entry point."""
    return _REGISTRY.source(name)


def shadowed() -> list[str]:
    """Installed adapter entry points hidden by a built-in name."""
    return _REGISTRY.shadowed()


def get(name: str) -> type[Adapter]:
    """The adapter class registered as `name` (UnknownName, naming the valid choices, if there is none)."""
    return _REGISTRY.entry(name)[0]


def comm_backends() -> list[str]:
    """`compare comm` backend names."""
    return list(_COMM)


def comm_backend_adapter(backend: str) -> str:
    """The adapter whose launcher and comm() a `compare comm` backend uses (UnknownName if none)."""
    if backend not in _COMM:
        raise UnknownName("backend", backend, comm_backends())
    return _COMM[backend]


def legend() -> dict[str, dict]:
    """How reports show each adapter and `compare comm` backend, recorded in every run (the record's `legend`) so
    that a report re-renders from its records alone, whatever the registry has become since: `place`, its place in
    the registry (its colour; the row order of a run that recorded none), `adapter`, the adapter whose colour a comm
    backend takes, and `blog_label`, its [place, name] in the seed blog's chart (None where it had none)."""
    out: dict[str, dict] = {}
    for place, name in enumerate(names()):
        try:
            blog = get(name).blog_label
        except Exception:  # noqa: BLE001 - an adapter module that fails to import has no blog label
            blog = None
        out[name] = {"place": place, "adapter": name, "blog_label": list(blog) if blog else None}
    for backend, adapter in _COMM.items():
        out.setdefault(backend, {**out[adapter], "blog_label": None})
    return out


def declared(attr: str) -> list:
    """Every adapter's class-level declaration `attr` (Launch.LOG_PEER_GONE, say), in registry order, leaving out
    empty ones and adapters whose module fails to import: what the harness reads of all frameworks at once."""
    out = []
    for name in names():
        try:
            value = getattr(get(name), attr)
        except Exception:  # noqa: BLE001 - an adapter module that fails to import declares nothing
            continue
        if value and value not in out:
            out.append(value)
    return out


def availability(name: str, device: str, world_size: int) -> Availability:
    """Availability that also covers an adapter module that fails to import; UnknownName for an unknown name."""
    try:
        cls = get(name)
    except UnknownName:
        raise
    except Exception as exc:  # an adapter file must not take the registry down with it
        return Availability(False, f"adapter module failed to import: {type(exc).__name__}: {exc}")
    try:
        return cls.availability(device, world_size)
    except Exception as exc:
        return Availability(False, f"availability check raised {type(exc).__name__}: {exc}")



def multinode(name: str, topology) -> Availability:
    """Whether the adapter can run across these hosts (its `multinode`), never raising."""
    try:
        return get(name).multinode(topology)
    except Exception as exc:  # noqa: BLE001 - a broken adapter file is a reason, not a crash
        return Availability(False, f"multi-node check raised {type(exc).__name__}: {exc}")


def availability_all(device: str, world_size: int, names_: list[str] | None = None) -> dict[str, Availability]:
    """`availability` of several adapters (every listed one by default), in registry order."""
    wanted = names() if names_ is None else list(dict.fromkeys(names_))
    return {n: availability(n, device, world_size) for n in wanted}
