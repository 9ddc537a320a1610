"""`compare run`: check the request, run the reference and every adapter, write records, report and plots.

Runs in: the parent. Everything that can be refused is refused in `plan()`, before anything is created on disk.
`execute()` then writes `records.jsonl` after every launch (harness/session.py), so whatever happens later,
finished rows are kept.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from harness import env as envmod
from harness import hosts, outdir
from harness.inputs import RunPlan, RunRequest
from harness.runner import Runner, plain_record, plan_rows, run_header
from harness.session import Session

RESULT_FILES = ("records.jsonl", "report.md", "throughput.png", "loss.png", "step_times.png", "epoch_time.png",
                "ttt_curve.png", "ttt_time.png")


def plan(req: RunRequest) -> RunPlan:
    """Check `req` and resolve it into a plan, refusing anything wrong (BadInput) before anything is written."""
    p = plan_rows(req)
    if p.topology is not None:
        p.topology = hosts.probe(p.topology)  # every remote host answers, or one line and exit 2
        p.oversubscribed = hosts.check_cores(p.topology, req.oversubscribe)
    if req.out is not None:
        p.out = req.out
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        nodes = f"_{len(p.topology.nodes)}nodes" if p.topology is not None else ""
        p.out = req.results_dir / f"{req.workload}_{envmod.hardware_slug(req.device)}{nodes}_{stamp}"
    outdir.check(p.out, req.force, RESULT_FILES)
    return p


def execute(p: RunPlan, ui, started: float | None = None) -> tuple[list[dict[str, Any]], bool]:
    """Run the plan; `ui` receives progress (see harness.cli.RunUI). Returns (records, interrupted). Raises
    SessionError when the results cannot be written (exit 1) and BadInput when another run holds the directory."""
    from harness import report

    req = p.request
    run_info = run_header(p, "run", [r.label for r in p.rows], started)
    remote = p.topology is not None and p.topology.remote
    with Session(p.out, RESULT_FILES, shared_scratch=remote) as session:
        ui.start(p)
        runner = Runner(session, ui, run_info, pipelined=p.until_target is None and not remote)

        def first_started():  # while the first launch starts up
            run_info["env"] = envmod.collect_safely(req.device)
            session.save([plain_record(run_info, p, row, repeat, "unavailable", row.reason)
                          for row in p.unavailable for repeat in range(req.repeats)])

        # Repeats are interleaved (all adapters, then all again) so slow drift of the machine hits all alike.
        jobs = [(p, row, repeat) for repeat in range(req.repeats) for row in p.runnable]
        stopped = runner.run(jobs, first_started)
        if stopped:
            runner.close_interrupted(stopped, jobs, req.device)
        session.finish(report.render)
    return session.records, stopped is not None


