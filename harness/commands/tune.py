"""`compare tune`: each backend's knobs searched within a budget, its best confirmed against its defaults, and the
comparison at defaults beside the comparison at best."""

from __future__ import annotations

from rich.markup import escape

from harness.commands.common import Invocation, conclude, console, execute, stop_on_signals, typed
from harness.commands.ui import TuneUI
from harness.ground.errors import first_sentence
from harness.core.requests import TuneRequest


def tune(req: TuneRequest) -> None:
    """Search each backend's performance knobs (never the maths) within a budget: a noise-aware race over fresh
    launches, the best confirmed against the defaults on launches of its own, then the verdict at defaults beside
    the verdict at best. Writes records.jsonl and report.md."""
    from harness import reports
    from harness.core import tuning
    from harness.reports import tune_report

    plan = tuning.plan(req)
    for name, why in {**plan.untunable, **plan.unavailable}.items():
        console.print(f"[yellow]note[/]: {escape(name)} is left out: {escape(first_sentence(why))}")
    for label, why in plan.skipped.items():
        console.print(f"[yellow]note[/]: candidate {escape(label)} is not tried: {escape(first_sentence(why))}")
    plan.run.request.command = typed(plan.run.rerun)
    stop_on_signals()
    records, interrupted = execute(tuning.execute, plan, TuneUI(), Invocation.started, reports.render)
    for line in tune_report.console_lines(records):
        console.print(escape(line), soft_wrap=True)
    conclude(records, plan.run.out, interrupted, "report.md and records.jsonl", "launch(es)")
