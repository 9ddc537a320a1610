"""`compare knobs`: every knob of an adapter (or option of a workload), read from the declaration that checks it."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.markup import escape

import adapters
import workloads
from harness.commands.common import console, fail
from harness.ground.argv import cli
from harness.shared.registry import is_reference


@dataclass
class KnobsRequest:
    """`compare knobs`."""

    name: str | None = field(default=None, metadata=cli(argument=True))
    """An adapter or a workload, yours too (path/to/file.py:NAME; default: every adapter)."""


def knobs(req: KnobsRequest) -> None:
    """Every knob of an adapter (or option of a workload): the values it takes, its default and what it does, read
    from the declaration that checks them."""
    from harness.shared.options import catalogue

    name = req.name
    if name is None:
        names = [("adapter", n) for n in adapters.names()]
    elif name in adapters.names():
        names = [("adapter", name)]
    elif (adapter := name.split(":", 1)[0]) in adapters.names():
        fail(f"'{name}' is a row, not an adapter: compare knobs takes an adapter's name alone (compare knobs "
             f"{adapter}); its knobs are given to compare run as -a {adapter}:KNOB=VALUE")
    elif name in workloads.names() or is_reference(name):
        names = [("workload", name)]
    else:
        fail(f"unknown adapter or workload '{name}'; valid choices: {', '.join(adapters.names())} (adapters), "
             f"{', '.join(workloads.names())} (workloads)")
    for kind, n in names:
        preset: dict = {}
        try:
            if kind == "adapter":
                cls = adapters.get(n).Knobs
            else:  # a variant (resnet50) sets some options itself: they are fixed, not defaults
                found, preset = workloads.workload_class(n)
                cls = found.Options
        except (workloads.BadReference, workloads.UserCodeError):
            raise  # a user's file: one line, or their traceback (harness/cli.py), as for compare run
        except Exception as exc:  # noqa: BLE001 - an adapter whose module fails to import still lists the others
            console.print(f"[bold]{escape(n)}[/]: cannot read its knobs ({escape(type(exc).__name__)}: "
                          f"{escape(str(exc))})")
            continue
        rows = catalogue(cls, "the framework" if kind == "adapter" else "the workload")
        how = f"compare run -a {n}:KNOB=VALUE" if kind == "adapter" else f"compare run -w {n} -o OPTION=VALUE"
        console.print(f"[bold]{escape(n)}[/] ({kind}; {escape(how)})" + ("" if rows else ": none"))
        for r in rows:
            if r["name"] in preset:
                console.print(f"  [bold]{escape(r['name'])}[/]: {escape(str(preset[r['name']]))}, set by the name {n} "
                              f"(another value: its base workload)")
                continue
            console.print(f"  [bold]{escape(r['name'])}[/]: {escape(r['values'])}; default {escape(r['default'])}")
            if r["doc"]:
                console.print(f"      {escape(r['doc'])}")
