"""`compare comm`: collectives and point-to-point primitives per backend, checked and timed."""

from __future__ import annotations

from rich.markup import escape

from harness.commands.common import console, execute, measured, planned, tuning_note, where
from harness.ground.errors import first_sentence
from harness.core.requests import CommRequest


def comm(req: CommRequest) -> None:
    """Benchmark and check collective and point-to-point primitives per backend."""
    from harness import reports
    from harness.core import comm_bench
    from harness.reports import comm_report

    _no_gpu_world(req)
    plan = planned(comm_bench.plan, req, "comm")
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
    measured(records, plan.out, "report.md, records.jsonl and busbw.png", interrupted, "backends",
             lambda r: r["backend"])


def _no_gpu_world(req: CommRequest) -> None:
    """On cuda, a world size left open on one machine is every GPU (harness/launching/hosts.py); where torch sees
    none, that is 1, refused as too few ranks when what is missing is the GPU. There the plan takes comm's own default
    of 2 ranks, so each backend's row says why it cannot run, as `compare run --device cuda` says it."""
    if req.device != "cuda" or req.world_size is not None or req.topology is not None:
        return
    if req.hosts is not None or req.hostfile is not None or req.launcher == "slurm":  # the slots set it
        return
    import torch

    if not torch.cuda.is_available():
        req.world_size = 2
