"""Workload registry (lazy imports). Add a workload: `workloads/<name>.py` with `WORKLOAD = <subclass of
workloads.base.Workload>`, plus one line in `_MODULES`. Variants (resnet18/resnet50) are names with preset options.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from workloads.base import Workload

# name -> (module, preset options)
_MODULES: dict[str, tuple[str, dict[str, Any]]] = {
    "digits": ("workloads.digits", {}),
    "resnet": ("workloads.resnet", {}),
    "resnet18": ("workloads.resnet", {"arch": "resnet18"}),
    "resnet50": ("workloads.resnet", {"arch": "resnet50"}),
    "widemlp": ("workloads.widemlp", {}),
    "tinygpt": ("workloads.tinygpt", {}),
}
DEFAULT = "digits"


class UnknownWorkload(KeyError):
    def __init__(self, name: str):
        super().__init__(name)
        self.message = f"unknown workload '{name}'; valid choices: {', '.join(names())}"

    def __str__(self) -> str:
        return self.message


def names() -> list[str]:
    return list(_MODULES)


def get(name: str, options: dict[str, Any] | None = None) -> Workload:
    if name not in _MODULES:
        raise UnknownWorkload(name)
    module, preset = _MODULES[name]
    return import_module(module).WORKLOAD({**preset, **(options or {})})
