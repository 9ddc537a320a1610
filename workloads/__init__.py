"""Workload registry (lazy imports). Add a workload: `workloads/<name>.py` with `WORKLOAD = <subclass of
workloads.base.Workload>`, plus one line in `_MODULES`. Variants (resnet18/resnet50) are names with preset options.
"""

from __future__ import annotations

from typing import Any

from harness.shared.registry import Registry, UnknownName
from workloads.base import Workload

# name -> module, or (module, preset options)
_MODULES: dict[str, str | tuple[str, dict[str, Any]]] = {
    "digits": "workloads.digits",
    "resnet": "workloads.resnet",
    "resnet18": ("workloads.resnet", {"arch": "resnet18"}),
    "resnet50": ("workloads.resnet", {"arch": "resnet50"}),
    "widemlp": "workloads.widemlp",
    "tinygpt": "workloads.tinygpt",
}
DEFAULT = "digits"
_REGISTRY = Registry("workload", _MODULES, "WORKLOAD")

__all__ = ["DEFAULT", "UnknownName", "Workload", "get", "names"]


def names() -> list[str]:
    return _REGISTRY.names()


def get(name: str, options: dict[str, Any] | None = None) -> Workload:
    """The workload `name` with `options` over its preset (UnknownName, OptionError on bad input)."""
    cls, preset = _REGISTRY.entry(name)
    return cls({**preset, **(options or {})})
