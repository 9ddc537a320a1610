"""`compare run`: the comparison, its records, report and plots."""

from __future__ import annotations

from harness.commands.common import Invocation, conclude, console, drew, execute, stop_on_signals, typed
from harness.commands.ui import RunUI
from harness.core.requests import RunRequest


def run(req: RunRequest) -> None:
    """Run the comparison and write records.jsonl, report.md and plots."""
    from harness import reports
    from harness.core import comparison
    from harness.reports import figures, run_report

    plan = comparison.plan(req)
    req.command = typed(plan.rerun)
    stop_on_signals()
    with figures.off(not req.plots):
        records, interrupted = execute(comparison.execute, plan, RunUI(), Invocation.started, reports.render)
    for line in run_report.console_verdict(records, plan.out):
        console.print(line)
    console.print(run_report.console_table(records))
    for line in run_report.console_notes(records):
        console.print(line)
    conclude(records, plan.out, interrupted, f"report.md, records.jsonl{' and plots' if drew(plan.out) else ''}",
             strict=req.strict)
