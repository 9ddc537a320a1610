"""`compare doctor`: this machine's noise floor, and the precision a comparison can reach here in what time."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import typer
from rich.markup import escape

import adapters
import workloads
from harness.commands.common import console, execute, fail, stop_on_signals
from harness.commands.ui import QuietUI, RunUI
from harness.shared.cache import cache_dir
from harness.ground.argv import cli


@dataclass
class DoctorRequest:
    """`compare doctor`."""

    launches: int = field(default=5, metadata=cli("--launches"))
    """Launches of the row whose variation is measured (3 to 50)."""
    adapter: str = field(default="ddp", metadata=cli("--adapter", "-a"))
    """The row to launch (an adapter, with knobs if any)."""
    workload: str = field(default=workloads.DEFAULT, metadata=cli("--workload", "-w"))
    """The workload the row trains (see `compare list`)."""
    steps: int | None = field(default=None, metadata=cli("--steps"))
    """Timed steps per launch (default: the workload's)."""
    as_json: bool = field(default=False, metadata=cli("--json", negatable=False))
    """Print JSON instead of text."""


def doctor(req: DoctorRequest) -> None:
    """This machine's noise floor: what it is doing, how much one row varies from launch to launch, and what
    precision a comparison can reach here in what time (no results directory is written; the variance components
    are kept in the cache directory, $COMPARE_CACHE, for default runs' design)."""
    from harness.core import noise_floor

    if "," in req.adapter:  # `compare run -a` takes a list; the doctor measures one row's variation
        fail(f"-a '{req.adapter}' names several rows; compare doctor launches one row: give one adapter (with knobs "
             f"if any); valid choices: {', '.join(adapters.names())}")
    planned, scratch = noise_floor.plan(req.adapter, req.workload, req.launches, req.steps)
    machine = noise_floor.sample_machine()
    if not req.as_json:
        for line in noise_floor.lines(machine, None):
            console.print(escape(line))
    stop_on_signals()
    records = execute(noise_floor.measure, planned, scratch, QuietUI() if req.as_json else RunUI())
    try:
        floor = noise_floor.noise_floor(records)
    except RuntimeError as exc:
        fail(f"cannot measure the noise floor: {exc}", 1)
    # at the workload's own steps, the components are what a default run designs from: kept for it
    floor["kept"] = floor["components"] is not None and req.steps is None
    if floor["kept"] and not noise_floor.store_components(floor["components"], planned.request.device):
        floor["kept"], floor["not_kept"] = False, str(cache_dir())
    if req.as_json:
        typer.echo(json.dumps({"machine": machine, "noise_floor": floor}, indent=2, default=str))
        return
    for line in noise_floor.lines(machine, floor)[3:]:
        console.print(escape(line))
