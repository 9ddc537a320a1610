"""`compare scale`: the comparison at several world sizes, speed-up, efficiency, memory and the model's prediction."""

from __future__ import annotations

import shlex

import typer
from rich.markup import escape

from harness.commands.common import Invocation, console, execute, fail, stop_on_signals, took, typed, warn_shared
from harness.commands.ui import ScaleUI
from harness.ground.argv import to_argv
from harness.ground.errors import BadInput
from harness.core.requests import ScaleRequest


def scale(req: ScaleRequest) -> None:
    """Sweep world sizes: speed-up, efficiency, memory and load balance, and the model's prediction."""
    from harness import reports
    from harness.core import sweep
    from harness.reports import figures, scale_report

    try:
        plan = sweep.plan(req)
    except BadInput as exc:
        fail(str(exc))
    req.command = typed(shlex.join(["compare", "scale", *to_argv(req)]))
    stop_on_signals()
    with figures.off(not req.plots):
        records, interrupted = execute(sweep.execute, plan, ScaleUI(), lambda line: console.print("  " + escape(line)),
                                       Invocation.started, reports.render)
    for line in scale_report.console_lines(plan.out, records):
        console.print(line)
    warn_shared(records, lambda r: f"{r['label']}@{r['scale']['point']}#{r['repeat']}")
    # one line: a path cut over two cannot be pasted
    console.print(f"wrote {plan.out}/report.md, records.jsonl{' and plots' if req.plots else ''}{took()}",
                  soft_wrap=True)
    if interrupted:
        typer.echo(f"interrupted: children stopped; finished points kept in {plan.out}", err=True)
        raise typer.Exit(130)
    if not any(r["status"] == "ok" for r in records):
        raise typer.Exit(1)
