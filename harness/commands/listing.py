"""`compare list`: every adapter and workload, with availability and the reason (and the fix)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.markup import escape

import adapters
import workloads
from harness.commands.common import console, fail
from harness.ground.argv import cli
from harness.core.checks import check_cores
from harness.core.checks import DEVICES, MAX_WORLD
from harness.core.requests import Request


@dataclass
class ListRequest:
    """`compare list`: availability for a device and world size, as `compare run` would check them."""

    device: str = field(default="cpu", metadata=cli("--device"))
    """Check availability for cpu or cuda."""
    world_size: int = field(default=2, metadata=cli("--world-size", "-n"))
    """Ranks to check availability for."""
    oversubscribe: bool = field(default=False, metadata=cli())
    """Check as `compare run --oversubscribe` would: more processes than usable cores allowed."""


def list_all(req: ListRequest) -> None:
    """Every adapter and workload, with availability and the reason."""
    from rich.table import Table

    device, world_size = req.device, req.world_size
    if device not in DEVICES:
        fail(f"unknown device '{device}'; valid choices: {', '.join(DEVICES)}")
    if world_size < 1:
        fail(f"world size must be at least 1, got {world_size}")
    if world_size > MAX_WORLD:  # --oversubscribe lifts the cores' bound, not this one
        fail(f"world size must be at most {MAX_WORLD:,}, got {world_size}")
    # the world size `compare run` would refuse is refused here too, in the same words
    over = check_cores(Request(device=device, world_size=world_size, oversubscribe=req.oversubscribe), world_size)
    t = Table(title=f"Adapters (device {device}, world size {world_size}{', oversubscribed' if over else ''})")
    for col in ("adapter", "from", "launcher", "available", "what it is / why not"):
        t.add_column(col)
    for name, avail in adapters.availability_all(device, world_size).items():
        try:
            cls = adapters.get(name)
            launcher, summary = cls.launcher, cls.summary
        except Exception:  # noqa: BLE001 - shown as the reason below
            launcher, summary = "?", ""
        t.add_row(name, escape(adapters.source(name)), launcher, "[green]yes[/]" if avail else "[red]no[/]",
                  escape(summary if avail else avail.message()))
    console.print(t)
    w = Table(title="Workloads (yours too: -w path/to/file.py:NAME or -w package.module:NAME)")
    for col in ("workload", "from", "global batch", "steps", "target", "what it is"):
        w.add_column(col)
    for name in workloads.names():
        try:
            wl, preset = workloads.workload_class(name)
        except Exception as exc:  # noqa: BLE001 - an installed package's entry point that fails: said, not fatal
            w.add_row(name, escape(workloads.source(name)), "", "", "", f"[red]cannot load[/]: {escape(str(exc))}")
            continue
        reason = wl().unavailable()
        w.add_row(name, escape(workloads.source(name)), str(wl.global_batch), f"{wl.warmup}+{wl.steps}",
                  "–" if wl.target is None else f"acc ≥ {wl.target} (--until-target: every {wl.eval_every} steps, "
                                                f"≤ {wl.max_steps_to_target})",
                  escape(wl.summary + "".join(f" ({k}={v})" for k, v in preset.items())) if not reason
                  else f"[red]unavailable[/]: {escape(reason)}")
    console.print(w)
    for what, hidden in (("adapter", adapters.shadowed()), ("workload", workloads.shadowed())):
        for entry in hidden:
            console.print(f"[yellow]note[/]: the installed {what} entry point {escape(entry)} is hidden by the "
                          f"built-in {what} of the same name")
