"""Workload registry (lazy imports). Add a workload: `workloads/<name>.py` with `WORKLOAD = <subclass of
workloads.base.Workload>`, plus one line in `_MODULES`. Variants (resnet18/resnet50) are names with preset options.

A user's own workload needs no edit here: `-w path/to/file.py:NAME` or `-w package.module:NAME` names a Workload
subclass or a function returning its pieces (workloads/function.py), and an installed package adds names through
the `compare.workloads` entry-point group (docs/your-model.md).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from harness.shared.options import OptionError
from harness.shared.registry import BadReference, Registry, UnknownName, UserCodeError, resolvable_reference
from workloads.base import Data, Workload
from workloads.function import FunctionWorkload, Pieces, from_function, workload

# name -> module, or (module, preset options)
_MODULES: dict[str, str | tuple[str, dict[str, Any]]] = {
    "digits": "workloads.digits",
    "resnet": "workloads.resnet",
    "resnet18": ("workloads.resnet", {"arch": "resnet18"}),
    "resnet50": ("workloads.resnet", {"arch": "resnet50"}),
    "widemlp": "workloads.widemlp",
    "tinygpt": "workloads.tinygpt",
    "hf": "workloads.hf",
}
DEFAULT = "digits"
GROUP = "compare.workloads"
_REGISTRY = Registry("workload", _MODULES, "WORKLOAD", group=GROUP,
                     hint="; or your own: -w path/to/file.py:NAME, -w package.module:NAME (docs/your-model.md)")

__all__ = ["DEFAULT", "BadReference", "Data", "Pieces", "UnknownName", "UserCodeError", "Workload", "get", "names",
           "source", "workload"]


def names() -> list[str]:
    """The built-in workloads, then those installed packages add (entry points)."""
    return _REGISTRY.names()


def source(name: str) -> str:
    """Where the workload `name` comes from: built-in, an entry point (which package), a file or a module."""
    return _REGISTRY.source(name)


def resolvable(name: str) -> str:
    """`name` as a rank resolves it wherever it starts: a file reference with its path made absolute (a launcher
    may start ranks in another directory); names and modules unchanged."""
    return name if name in names() else resolvable_reference(name)


def provenance(name: str) -> str:
    """`source(name)`, and for a file the SHA-256 of its text, so that a record says which version of it ran."""
    where = source(name)
    got = digest(name)
    return where + (f" (sha256 {got})" if got else "")


def digest(name: str) -> str | None:
    """The first 16 hex digits of the SHA-256 of the workload's file, for a file reference; None for any other (a
    name, a module) or a file that cannot be read."""
    import hashlib

    path = _file_of(name)
    if path is None:
        return None
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def _file_of(name: str) -> Path | None:
    """The file a reference `path/to/file.py:NAME` names, read from the reference alone (importing it runs the
    user's code: that is bounded where it is done); None for a name or a module."""
    head = name.rpartition(":")[0] if ":" in name else ""
    return Path(head).resolve() if head.endswith(".py") else None


class WorkloadChanged(Exception):
    """The workload's file is no longer the one the run began with: a launch would train another model."""


def check_unchanged(name: str, began: str | None) -> None:
    """WorkloadChanged where the file of workload `name` no longer has the digest `began` (the run's, taken before
    it first imported the file): an edit during a comparison would have the rows after it train another model
    than the rows before, under one name and one recorded digest."""
    if began is None:
        return
    now = digest(name)
    if now != began:
        path = _file_of(name)
        raise WorkloadChanged(f"the workload file {path} changed since this run began (sha256 {began}, now "
                              f"{now or 'unreadable'}): this row would train another model than the rows before it; "
                              f"run the comparison again once the file is as you want it")


def slug(name: str) -> str:
    """`name` as a results directory's name begins: a reference's NAME (`examples/my_model.py:mlp` gives `mlp`)."""
    if ":" not in name:
        return name
    return re.sub(r"[^\w.-]", "_", name.rpartition(":")[2]) or "workload"


def shadowed() -> list[str]:
    """Installed entry points hidden by a built-in name."""
    return _REGISTRY.shadowed()


def _names(signature: inspect.Signature) -> str:
    return "(" + ", ".join(str(p.replace(annotation=inspect.Parameter.empty, default=inspect.Parameter.empty))
                           for p in signature.parameters.values()) + ")"


def _check_overrides(cls: type[Workload], name: str) -> None:
    """Every method of the contract that `cls` overrides takes every argument the harness may pass it (BadReference
    naming the method and what it must take otherwise): `def materialize(self)` failed with a TypeError and
    compare's own traceback, before anything ran."""
    for meth, base in vars(Workload).items():
        if meth.startswith("_") or not inspect.isfunction(base):
            continue
        mine = inspect.getattr_static(cls, meth)
        if mine is base:
            continue
        contract = inspect.signature(base)
        static = isinstance(mine, staticmethod)
        func = mine.__func__ if isinstance(mine, (staticmethod, classmethod)) else mine
        if not callable(func):
            raise BadReference(f"workload '{name}': {cls.__name__}.{meth} is {type(func).__name__}, where the "
                               f"contract has a method {meth}{_names(contract)} (workloads/base.py)")
        try:
            sig = inspect.signature(func)
        except (TypeError, ValueError):  # a builtin or C callable: nothing to read
            continue
        try:
            sig.bind(*[None] * (len(contract.parameters) - (1 if static else 0)))
        except TypeError:
            raise BadReference(
                f"workload '{name}': {cls.__name__}.{meth}{_names(sig)} cannot take the arguments compare passes it: "
                f"{meth}{_names(contract)} (the contract: workloads/base.py, docs/your-model.md)") from None


def workload_class(name: str) -> tuple[type[Workload], dict[str, Any]]:
    """(the Workload class, its preset options) for a name, file or module reference; a workload function becomes a
    class of its own (workloads/function.py). UnknownName, BadReference or UserCodeError otherwise."""
    obj, preset = _REGISTRY.entry(name, references=True)
    if isinstance(obj, type) and issubclass(obj, Workload):
        _check_overrides(obj, name)
        if inspect.isabstract(obj):  # a subclass that leaves a method of the contract out, or Workload itself
            missing = sorted(getattr(obj, "__abstractmethods__", ()))
            raise BadReference(f"workload '{name}': class {obj.__name__} does not define {', '.join(missing)}, which "
                               f"every workload must (docs/your-model.md, \"The full contract\")")
        return obj, preset
    if getattr(obj, "__compare_workload__", None) is not None or inspect.isfunction(obj):
        cls = getattr(obj, "__compare_class__", None)
        if cls is None:  # one class per function and process: its pieces are computed once
            cls = from_function(obj, name)
            try:
                obj.__compare_class__ = cls
            except AttributeError:  # a builtin or a bound method: no attributes of its own
                pass
        return cls, preset
    what = f"class {obj.__name__}" if isinstance(obj, type) else type(obj).__name__
    raise BadReference(f"workload '{name}' is {'an' if what[0] in 'aeiou' else 'a'} {what}, not a workload: give a subclass of workloads.Workload or a "
                       f"function that returns its pieces (docs/your-model.md)")


def get(name: str, options: dict[str, Any] | None = None) -> Workload:
    """The workload `name` with `options` over its preset (UnknownName, BadReference, UserCodeError, OptionError
    on bad input)."""
    cls, preset = workload_class(name)
    # a variant is its preset: an option that overrides it would run another variant under this one's name
    for key, value in preset.items():
        if key in (options or {}) and str(options[key]) != str(value):
            base = next((n for n, m in _MODULES.items() if m == _MODULES[name][0]), None)
            raise OptionError(f"it is {base or cls.__name__} with {key}={value}; -o {key}={options[key]} "
                              f"would run another under its name: give -w {base or name} -o {key}={options[key]}")
    options = {**preset, **(options or {})}
    if cls.__init__ is not Workload.__init__:
        try:
            inspect.signature(cls).bind(options)
        except TypeError as exc:
            raise BadReference(f"workload '{name}': compare makes it as {cls.__name__}(options), one argument "
                               f"(the -o options as a dict, or None), and its __init__ cannot take that ({exc}); "
                               f"take `options=None` and pass it to super().__init__(options)") from None
        except ValueError:  # no signature to read: let the call say
            pass
        try:
            return cls(options)
        except (BadReference, UserCodeError, OptionError):
            raise
        except Exception as exc:  # noqa: BLE001 - the user's __init__
            raise UserCodeError(f"making workload {name} ({cls.__name__}(options))", exc) from None
    return cls(options)
