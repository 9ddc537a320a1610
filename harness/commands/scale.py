"""`compare scale`: the comparison at several world sizes, speed-up, efficiency, memory and the model's prediction."""

from __future__ import annotations

from rich.markup import escape

from harness.commands.common import Invocation, console, drew, execute, measured, planned, took
from harness.commands.ui import ScaleUI
from harness.core.requests import ScaleRequest


def scale(req: ScaleRequest) -> None:
    """Sweep world sizes: speed-up, efficiency, memory and load balance, and the model's prediction."""
    from harness import reports
    from harness.core import sweep
    from harness.reports import figures, scale_report

    plan = planned(sweep.plan, req, "scale")
    with figures.off(not req.plots):
        records, interrupted = execute(sweep.execute, plan, ScaleUI(), lambda line: console.print("  " + escape(line)),
                                       Invocation.started, reports.render)
    for line in scale_report.console_lines(plan.out, records):
        console.print(line)
    measured(records, plan.out, f"report.md, records.jsonl{' and plots' if drew(plan.out) else ''}{took()}", interrupted,
             "points", lambda r: f"{r['label']}@{r['scale']['point']}#{r['repeat']}")
