"""`compare run`: the comparison, its records, report and plots."""

from __future__ import annotations

import typer

from harness.commands.common import Invocation, console, execute, fail, stop_on_signals, took, typed, warn_shared
from harness.commands.ui import RunUI
from harness.core.errors import BadInput
from harness.core.record import MEASURED
from harness.core.requests import RunRequest


def run(req: RunRequest) -> None:
    """Run the comparison and write records.jsonl, report.md and plots."""
    from harness import reports
    from harness.core import comparison
    from harness.reports import figures, run_report

    try:
        plan = comparison.plan(req)
    except BadInput as exc:
        fail(str(exc))
    req.command = typed(plan.rerun)
    stop_on_signals()
    with figures.off(not req.plots):
        records, interrupted = execute(comparison.execute, plan, RunUI(), Invocation.started, reports.render)
    for line in run_report.console_verdict(records):
        console.print(line)
    console.print(run_report.console_table(records))
    for line in run_report.console_notes(records):
        console.print(line)
    warn_shared(records, lambda r: f"{r['label']}#{r['repeat']}")
    # one line: a path cut over two cannot be pasted
    console.print(f"wrote {plan.out}/report.md, records.jsonl{' and plots' if req.plots else ''}{took()}",
                  soft_wrap=True)
    if interrupted:
        done = sum(r["status"] not in ("not_run", "unavailable") for r in records)
        typer.echo(f"interrupted: children stopped; {done} row(s) kept in {plan.out}", err=True)
        raise typer.Exit(130)
    if not any(r["status"] in MEASURED for r in records):
        raise typer.Exit(1)
