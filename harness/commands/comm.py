"""`compare comm`: collectives and point-to-point primitives per backend, checked and timed."""

from __future__ import annotations

import shlex

import typer
from rich.markup import escape

from harness.commands.common import (console, execute, fail, stop_on_signals, tuning_note, typed, warn_shared,
                                     where)
from harness.ground.argv import to_argv
from harness.ground.errors import BadInput, first_sentence
from harness.core.requests import CommRequest


def comm(req: CommRequest) -> None:
    """Benchmark and check collective and point-to-point primitives per backend."""
    from harness import reports
    from harness.core import comm_bench
    from harness.reports import comm_report

    try:
        plan = comm_bench.plan(req)
    except BadInput as exc:
        fail(str(exc))
    req.command = typed(shlex.join(["compare", "comm", *to_argv(req)]))
    stop_on_signals()
    over = " (oversubscribed)" if plan.oversubscribed else ""
    console.print(f"[bold]compare comm[/]: {len(plan.ops)} ops x {len(plan.sizes)} sizes, {req.world_size} ranks"
                  f"{where(plan)}{over}, {req.dtype} -> {plan.out}")
    tuning_note()
    for row in plan.unavailable:
        console.print(f"  [yellow]{escape(row.label)}: unavailable[/] - {escape(first_sentence(row.reason))}")
    records, interrupted = execute(comm_bench.execute, plan, lambda line: console.print("  " + escape(line)),
                                   reports.render)
    for line in comm_report.summary_lines(records):
        console.print(escape(line))
    warn_shared(records, lambda r: r["backend"])
    # one line: a path cut over two cannot be pasted
    console.print(f"wrote {plan.out}/report.md, records.jsonl and busbw.png", soft_wrap=True)
    if interrupted:
        typer.echo(f"interrupted: children stopped; finished backends kept in {plan.out}", err=True)
        raise typer.Exit(130)
    if not any(r["status"] == "ok" for r in records):
        raise typer.Exit(1)
